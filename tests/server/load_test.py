"""Load test of slake-server: many concurrent streaming clients, a quarter of which disconnect
mid-stream, some sending malformed requests. Checks that every well-formed request completes
(its stream ends with a finish_reason and [DONE]), every malformed one gets a 400 with OpenAI's
error object, the server stays up and its slots all come free, and its peak resident memory
stays within the plan: the weights, the KV memory of every slot (-np x -c, or --kv-memory),
and a fixed allowance for the rest. Prints a summary (throughput, time to first token, mean
decode batch) and exits 1 on any failure.

  python tests/server/load_test.py [--model M] [--clients 32] [--requests 200] [-np 8] [-c 512]
(SLAKE_BIN_DIR and SLAKE_SHARED_DIR as for the tests; the defaults are build/bin and ../shared.)"""
import argparse
import concurrent.futures
import http.client
import json
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
os.environ.setdefault("SLAKE_BIN_DIR", os.path.join(ROOT, "build", "bin"))
os.environ.setdefault("SLAKE_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))
sys.path.insert(0, HERE)
from harness import STORIES, Server  # noqa: E402

WORDS = "the a little girl dog cat park sun ball tree happy ran played saw big red bird went home".split()
MALFORMED = [b"{not json", json.dumps({"prompt": "x", "n": 9}).encode(), json.dumps({"prompt": "x", "max_tokens": "ten"}).encode(),
             json.dumps({"prompt": "x", "model": 7}).encode(), b"[]"]
ALLOWANCE = 96 << 20  # threads, HTTP buffers, allocator slack, the tokenizer and template


def one(port, i, rng_seed, args):
    rng = random.Random(rng_seed)
    kind = "full" if args.only_full else "bad" if i % 8 == 0 else "leave" if i % 4 == 1 else "full"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=args.timeout)
    t0 = time.time()
    try:
        if kind == "bad":
            conn.request("POST", "/v1/completions", body=MALFORMED[i % len(MALFORMED)],
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            body = json.loads(r.read())
            ok = r.status == 400 and body["error"]["type"] == "invalid_request_error" and body["error"]["message"]
            return {"kind": kind, "ok": bool(ok), "why": f"status {r.status} {body}"}
        prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40)))
        req = {"prompt": prompt, "max_tokens": rng.randint(16, args.max_tokens), "temperature": 0.8, "seed": i,
               "stream": True}
        if kind == "leave":  # still running when it leaves
            req.update(max_tokens=args.max_tokens, ignore_eos=True)
        conn.request("POST", "/v1/completions", body=json.dumps(req), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return {"kind": kind, "ok": False, "why": f"status {r.status} {r.read()[:200]}"}
        events, finish, ttft, done = 0, None, None, False
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                done = True
                break
            chunk = json.loads(line[6:])
            if "error" in chunk:
                return {"kind": kind, "ok": False, "why": f"error event {chunk}"}
            if ttft is None:
                ttft = time.time() - t0
            events += 1
            finish = chunk["choices"][0]["finish_reason"] or finish
            if kind == "leave" and events == 3:
                conn.sock.close()  # goes away mid-stream
                return {"kind": kind, "ok": True, "ttft": ttft}
        ok = done and finish in ("length", "stop")
        return {"kind": kind, "ok": ok, "ttft": ttft, "events": events, "seconds": time.time() - t0,
                "why": f"done={done} finish={finish}"}
    except Exception as e:  # noqa: BLE001: any failure of a request is a failure of the test
        return {"kind": kind, "ok": False, "why": repr(e)}
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=STORIES)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("-np", "--parallel", type=int, default=8)
    ap.add_argument("-c", "--ctx", type=int, default=512)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--max-seconds", type=float, default=300, help="the whole run's bound")
    ap.add_argument("--only-full", action="store_true", help="no disconnects, no malformed requests (throughput runs)")
    args = ap.parse_args()

    server = Server(args.model, "-c", str(args.ctx * args.parallel), "-np", str(args.parallel), "-t", str(args.threads),
                    "--queue", str(args.clients))
    failures = []
    try:
        rss0 = server.metric("slake_process_resident_bytes")
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as ex:
            futs = [ex.submit(one, server.port, i, 1000 + i, args) for i in range(args.requests)]
            results = [f.result(timeout=args.max_seconds) for f in futs]
        wall = time.time() - t0
        for i, r in enumerate(results):
            if not r["ok"]:
                failures.append(f"request {i} ({r['kind']}): {r.get('why')}")
        # Slots come free (the last disconnects are noticed within a step or two).
        deadline = time.time() + 10
        while time.time() < deadline and (server.metric("slake_slots_busy") or server.metric("slake_queue_length")):
            time.sleep(0.05)
        health = json.loads(server.get("/health"))
        busy, queued = server.metric("slake_slots_busy"), server.metric("slake_queue_length")
        gen = server.metric("slake_generated_tokens_total")
        steps, rows = server.metric("slake_decode_steps_total"), server.metric("slake_decode_rows_total")
        decode_s = server.metric("slake_decode_seconds_total")
        cancelled = server.metric('slake_requests_total{outcome="cancelled"}')
        finished = server.metric('slake_requests_total{outcome="finished"}')
        invalid = server.metric('slake_requests_total{outcome="invalid"}')
        peak = server.metric("slake_process_peak_resident_bytes")
        kv_full = [float(line.split()[-1]) for line in server.get("/metrics").splitlines()
                   if line.startswith("slake_kv_bytes{")]
        if health != {"status": "ok"}:
            failures.append(f"/health says {health}")
        if busy or queued:
            failures.append(f"after the run: {busy} slots busy, {queued} queued")
        n_bad = sum(r["kind"] == "bad" for r in results)
        if invalid != n_bad:
            failures.append(f"{invalid} requests counted invalid, {n_bad} sent")
        # The plan: what the process held before any request (weights, tokenizer, threads), every
        # slot's full KV cache, and the allowance.
        per_token = None
        for line in server.log_text().splitlines():
            if "full KV cache" in line:
                per_token = float(line.split("full KV cache ")[1].split(" MiB")[0]) * 1048576 / args.ctx
        plan = rss0 + args.parallel * args.ctx * (per_token or 0) + ALLOWANCE
        if peak > plan:
            failures.append(f"peak RSS {peak / 2**20:.1f} MiB over the plan {plan / 2**20:.1f} MiB")
        ttfts = sorted(r["ttft"] for r in results if r.get("ttft") is not None)
        kinds = {k: sum(r["kind"] == k for r in results) for k in ("full", "leave", "bad")}
        print(f"load test: {args.requests} requests from {args.clients} clients on {os.path.basename(args.model)}, "
              f"-np {args.parallel} -c {args.ctx} -t {args.threads}: {kinds['full']} complete streams, "
              f"{kinds['leave']} disconnects, {kinds['bad']} malformed")
        print(f"  wall {wall:.1f} s, {gen:.0f} tokens generated ({gen / wall:.0f} tokens/s), "
              f"{finished:.0f} finished, {cancelled:.0f} cancelled by disconnect")
        print(f"  time to first token: p50 {statistics.median(ttfts) * 1000:.0f} ms, "
              f"p95 {ttfts[int(0.95 * (len(ttfts) - 1))] * 1000:.0f} ms; mean decode batch {rows / max(steps, 1):.2f} "
              f"sequences over {steps:.0f} steps, {decode_s / max(steps, 1) * 1000:.1f} ms a step")
        print(f"  RSS before {rss0 / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB (plan {plan / 2**20:.1f} MiB); "
              f"KV held by the idle slots now {sum(kv_full) / 2**20:.2f} MiB")
    finally:
        rc = server.stop()
    if rc != 0:
        failures.append(f"the server exited with {rc} on SIGTERM")
    for f in failures[:20]:
        print("FAIL:", f)
    print("load test:", "FAILED" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
