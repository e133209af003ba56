"""slake-server's HTTP layer against slow and hostile clients (the HTTP part of the hardening issue),
on 127.0.0.1 with stories260K, each bounded in bytes, connections and seconds: slowloris headers,
a request line with no end before the API key is checked, chunked bodies past the body limit, a
body the API key never allowed, pipelined requests, ambiguous framing (conflicting lengths,
Transfer-Encoding with Content-Length, a negative length, an unknown transfer coding), and
hundreds of idle connections. Each answer is checked as status and OpenAI error object (where the
server answers at all); /health answers within 1 s throughout, a greedy request afterwards gives
the same text as before, and the server's resident memory stays bounded."""
import json
import os
import re
import socket
import threading
import time
import unittest
import urllib.error
import urllib.request

from harness import STORIES, Server

KEY = "sk-test"
AUTH = f"Authorization: Bearer {KEY}\r\n"
HEADER_TIMEOUT = 2  # --timeout-headers of the server under test, seconds


def rss_mib(server):
    with open(f"/proc/{server.proc.pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def connect(server, timeout=10):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(sock):
    """One HTTP/1.1 response from `sock` (Content-Length or chunked framing): (status, headers, body
    bytes). Raises ConnectionError when the server closed before a whole response."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError(f"closed before a response's headers ({buf!r})")
        buf += data
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()

    def more():
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed within a response's body")
        return data

    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(rest) < n:
            rest += more()
        return status, headers, rest[:n], rest[n:]
    body = b""
    while True:  # chunked
        while b"\r\n" not in rest:
            rest += more()
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line.split(b";")[0], 16)
        while len(rest) < size + 2:
            rest += more()
        body, rest = body + rest[:size], rest[size + 2:]
        if size == 0:
            return status, headers, body, rest


def exchange(server, raw: bytes, timeout=10):
    """Sends `raw` on a new connection and reads one response."""
    with connect(server, timeout) as s:
        s.sendall(raw)
        status, headers, body, _ = read_response(s)
        return status, headers, body


def closed_within(sock, seconds):
    """True if the peer closes `sock` (after any bytes it sends) within `seconds`."""
    sock.settimeout(seconds)
    end = time.time() + seconds
    try:
        while time.time() < end:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return False


def request(method, path, body=b"", extra=""):
    return (f"{method} {path} HTTP/1.1\r\nHost: x\r\n{AUTH}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class HttpAttacks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(STORIES, "-c", "512", "-np", "2", "--queue", "2", "-t", "1", "--api-key", KEY,
                            "--timeout-headers", str(HEADER_TIMEOUT))
        cls.greedy = cls.complete()
        cls.rss0 = rss_mib(cls.server)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    @classmethod
    def complete(cls):
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}).encode()
        status, _, reply = exchange(cls.server, request("POST", "/v1/completions", body), timeout=60)
        assert status == 200, reply
        return json.loads(reply)["choices"][0]["text"]

    def health_within(self, seconds=1.0):
        t = time.time()
        status, _, body = exchange(self.server, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", timeout=seconds + 1)
        self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))
        self.assertLess(time.time() - t, seconds)

    def tearDown(self):
        self.health_within()
        self.assertEqual(self.complete(), self.greedy)
        self.assertLess(rss_mib(self.server) - self.rss0, 50, "resident memory after the attack")

    def expect_error(self, status, body, want, *needles):
        self.assertEqual(status, want, body)
        err = json.loads(body)["error"]
        for n in needles:
            self.assertIn(n, err["message"])
        return err

    def test_slowloris_headers_hold_nothing_and_time_out(self):
        # Twelve connections (more than --np + --queue + 8 HTTP workers would be) that send a header
        # line every 0.5 s: /health and a completion are served meanwhile, and each connection is
        # answered 408 and closed once its headers have taken --timeout-headers.
        socks = [connect(self.server) for _ in range(12)]
        for s in socks:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        t0 = time.time()
        stop = threading.Event()

        def drip():
            i = 0
            while not stop.wait(0.5):
                for s in socks:
                    try:
                        s.sendall(f"X-Drip-{i}: 1\r\n".encode())
                    except OSError:
                        pass
                i += 1

        dripper = threading.Thread(target=drip)
        dripper.start()
        try:
            self.health_within()
            self.assertEqual(self.complete(), self.greedy)
            for s in socks:
                status, _, body, _ = read_response(s)  # within the socket's 10 s
                self.expect_error(status, body, 408, "headers")
                self.assertTrue(closed_within(s, 2))
            self.assertLess(time.time() - t0, HEADER_TIMEOUT + 2)
        finally:
            stop.set()
            dripper.join()
            for s in socks:
                s.close()

    def test_hundreds_of_idle_connections_hold_nothing(self):
        socks = [connect(self.server) for _ in range(300)]
        try:
            self.health_within()
            self.assertTrue(closed_within(socks[0], HEADER_TIMEOUT + 2), "an idle connection is closed")
        finally:
            for s in socks:
                s.close()

    def test_endless_request_line_is_cut_before_the_key_is_checked(self):
        # A request line with no CRLF: the server answers 431 and closes once past its header limit,
        # long before the 64 MiB that the client would send.
        with connect(self.server) as s:
            sent = 0
            chunk = b"GET /" + b"a" * (1 << 20)
            try:
                while sent < (64 << 20):
                    s.sendall(chunk)
                    sent += len(chunk)
                    chunk = b"a" * (1 << 20)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.assertLess(sent, 16 << 20, "bytes the server took before it stopped reading")
            try:
                status, _, body, _ = read_response(s)
                self.expect_error(status, body, 431, "header")
            except (ConnectionError, OSError):
                pass  # the reset may overtake the answer

    def test_endless_header_without_key_is_cut(self):
        with connect(self.server) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Big: ")
            sent = 0
            try:
                while sent < (64 << 20):
                    s.sendall(b"b" * (1 << 20))
                    sent += 1 << 20
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.assertLess(sent, 16 << 20)

    def test_body_without_key_is_refused_before_it_is_read(self):
        # 50 MB announced, none sent: the answer is a 401 at once, not a wait for the body.
        with connect(self.server, timeout=5) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n\r\n")
            status, headers, body, _ = read_response(s)
            self.expect_error(status, body, 401, "API key")
            self.assertEqual(headers.get("connection"), "close")
            self.assertTrue(closed_within(s, 2))

    def test_chunked_body_past_the_limit_is_413(self):
        # 100 chunks of 1 MiB against the 64 MiB body limit: refused once past it.
        with connect(self.server, timeout=30) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + AUTH.encode() +
                      b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            sent = 0
            chunk = b"100000\r\n" + b" " * (1 << 20) + b"\r\n"
            try:
                for _ in range(100):
                    s.sendall(chunk)
                    sent += 1 << 20
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.assertLess(sent, 80 << 20)
            try:
                status, _, body, _ = read_response(s)
                self.expect_error(status, body, 413, "64 MiB")
            except (ConnectionError, OSError):
                pass

    def test_small_chunked_body_is_served(self):
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}).encode()
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7)) + b"0\r\n\r\n"
        status, _, reply = exchange(self.server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + AUTH.encode() +
                                    b"Transfer-Encoding: chunked\r\n\r\n" + chunked, timeout=60)
        self.assertEqual(status, 200, reply)
        self.assertEqual(json.loads(reply)["choices"][0]["text"], self.greedy)

    def test_pipelined_requests_are_all_answered_in_order(self):
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}).encode()
        raw = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + request("POST", "/v1/completions", body) +
               request("GET", "/v1/models"))
        with connect(self.server, timeout=60) as s:
            s.sendall(raw)
            status, _, first, rest = read_response(s)
            self.assertEqual((status, json.loads(first)), (200, {"status": "ok"}))
            # What read_response took past the first response belongs to the next ones.
            s2 = _Prefixed(s, rest)
            status, _, second, rest = read_response(s2)
            self.assertEqual(status, 200, second)
            self.assertEqual(json.loads(second)["choices"][0]["text"], self.greedy)
            status, _, third, _ = read_response(_Prefixed(s, rest))
            self.assertEqual(status, 200, third)
            self.assertEqual(json.loads(third)["object"], "list")

    def test_ambiguous_framing_is_400_and_closes(self):
        cases = {
            "conflicting lengths": "Content-Length: 5\r\nContent-Length: 6\r\n",
            "length and chunked": "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
            "chunked and length": "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            "negative length": "Content-Length: -5\r\n",
            "unknown coding": "Transfer-Encoding: gzip\r\n",
            "chunked twice": "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        }
        for what, framing in cases.items():
            with self.subTest(what), connect(self.server, timeout=5) as s:
                s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n{AUTH}{framing}\r\nhello".encode())
                status, headers, body, _ = read_response(s)
                self.assertIn(status, (400, 501), (what, body))
                self.assertIn("error", json.loads(body))
                self.assertEqual(headers.get("connection"), "close", what)
                self.assertTrue(closed_within(s, 2), what)

    def test_expect_continue_gets_100_then_the_answer(self):
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}).encode()
        with connect(self.server, timeout=60) as s:
            s.sendall(request("POST", "/v1/completions", body, extra="Expect: 100-continue\r\n")[:-len(body)])
            s.settimeout(5)
            interim = s.recv(64)
            self.assertTrue(interim.startswith(b"HTTP/1.1 100"), interim)
            while b"\r\n\r\n" not in interim:
                interim += s.recv(64)
            s.settimeout(60)
            s.sendall(body)
            status, _, reply, _ = read_response(_Prefixed(s, interim.split(b"\r\n\r\n", 1)[1]))
            self.assertEqual(status, 200, reply)
            self.assertEqual(json.loads(reply)["choices"][0]["text"], self.greedy)


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class LeavingClients(unittest.TestCase):
    def test_a_non_streamed_request_whose_client_left_is_cancelled(self):
        # 16000 tokens take seconds; the client closes after 0.3 s and the request is cancelled
        # (before: generated to the end, unnoticed).
        server = Server(STORIES, "-c", "16384", "-np", "1", "-t", "1")
        try:
            body = json.dumps({"prompt": "Once", "max_tokens": 16000, "ignore_eos": True}).encode()
            with connect(server) as s:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                time.sleep(0.3)
            deadline = time.time() + 5
            while server.metric('slake_requests_total{outcome="cancelled"}') < 1 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(server.metric('slake_requests_total{outcome="cancelled"}'), 1)
            self.assertLess(server.metric("slake_generated_tokens_total"), 16000)
        finally:
            server.stop()


class _Prefixed:
    """A socket whose next reads first return `prefix`."""

    def __init__(self, sock, prefix):
        self.sock, self.prefix = sock, prefix

    def recv(self, n):
        if self.prefix:
            out, self.prefix = self.prefix[:n], self.prefix[n:]
            return out
        return self.sock.recv(n)


if __name__ == "__main__":
    unittest.main()
