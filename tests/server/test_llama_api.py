"""llama-server's native API on slake-server, checked against llama-server's field names and
against independent references: /completion's content equals slake-cli's greedy text, its stream
adds up to the same text and ends with a stop: true object (no [DONE]), stop_type and
stopping_word say why it stopped, timings count the prompt and the generated tokens, logit_bias
takes llama-server's [[token, false]] form; /apply-template equals the chat template rendered by
jinja2 (what transformers renders with); /props describes the server; unknown fields are 400s;
CORS answers only the origins of --cors-origins."""
import json
import os
import time
import unittest
import urllib.error
import urllib.request

import jinja2

from harness import SHARED, STORIES, Server, cli_greedy

CHATML = os.path.join(SHARED, "chat-templates", "HuggingFaceTB-SmolLM2-135M-Instruct.jinja")
CTX = 512


def post(server, path, body, raw=False):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            data = r.read().decode()
            return r.status, data if raw else json.loads(data)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class NativeApi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(STORIES, "-c", str(2 * CTX), "-np", "2", "-t", "1", "--chat-template-file", CHATML)
        cls.greedy = cli_greedy(STORIES, "Once upon a time", 24, CTX)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_completion_equals_cli_greedy(self):
        for path in ("/completion", "/completions"):
            status, r = post(self.server, path, {"prompt": "Once upon a time", "n_predict": 24, "temperature": 0,
                                                 "return_tokens": True, "cache_prompt": True})
            self.assertEqual(status, 200, r)
            self.assertEqual(r["content"], self.greedy)
            self.assertTrue(r["stop"])
            self.assertEqual(r["stop_type"], "limit")
            self.assertEqual(r["tokens_predicted"], 24)
            self.assertEqual(len(r["tokens"]), 24)
            t = r["timings"]
            self.assertEqual(t["predicted_n"], 24)
            self.assertEqual(t["prompt_n"] + t["cache_n"], r["tokens_evaluated"])
            self.assertGreater(t["predicted_per_second"], 0)
            self.assertIn("Once upon a time", r["prompt"])

    def test_stream_adds_up_and_ends_with_stop(self):
        status, raw = post(self.server, "/completion", {"prompt": "Once upon a time", "n_predict": 24, "temperature": 0,
                                                       "stream": True}, raw=True)
        self.assertEqual(status, 200)
        events = [json.loads(line[6:]) for line in raw.split("\n") if line.startswith("data: ")]
        self.assertNotIn("[DONE]", raw)
        self.assertTrue(all(not e["stop"] for e in events[:-1]))
        self.assertTrue(events[-1]["stop"])
        self.assertEqual("".join(e["content"] for e in events), self.greedy)
        self.assertEqual(events[-1]["stop_type"], "limit")

    def test_stop_word_and_logit_bias(self):
        word = self.greedy.split()[2]
        status, r = post(self.server, "/completion", {"prompt": "Once upon a time", "n_predict": 24, "temperature": 0,
                                                     "stop": [word]})
        self.assertEqual((r["stop_type"], r["stopping_word"]), ("word", word))
        self.assertEqual(r["content"], self.greedy[:self.greedy.index(word)])
        status, r = post(self.server, "/completion", {"prompt": "Once upon a time", "n_predict": 1, "temperature": 0,
                                                     "return_tokens": True})
        first = r["tokens"][0]
        status, r = post(self.server, "/completion", {"prompt": "Once upon a time", "n_predict": 1, "temperature": 0,
                                                     "return_tokens": True, "logit_bias": [[first, False]]})
        self.assertEqual(status, 200, r)
        self.assertNotEqual(r["tokens"][0], first)

    def test_apply_template_equals_jinja2(self):
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "How are you?"}]
        status, r = post(self.server, "/apply-template", {"messages": messages})
        self.assertEqual(status, 200, r)
        with open(CHATML) as f:
            want = jinja2.Environment().from_string(f.read()).render(messages=messages, add_generation_prompt=True,
                                                                      bos_token="", eos_token="", tools=None)
        self.assertEqual(r["prompt"], want)

    def test_slots(self):
        status, r = post(self.server, "/completion", {"prompt": "Once upon a time", "n_predict": 5, "temperature": 0})
        want = r["tokens_evaluated"] + 4
        for _ in range(50):  # the slot list is refreshed at the end of the scheduler's step
            slots = json.loads(self.server.get("/slots"))
            if want in [s["n_past"] for s in slots] and not any(s["is_processing"] for s in slots):
                break
            time.sleep(0.02)
        self.assertEqual([s["id"] for s in slots], [0, 1])
        self.assertTrue(all(not s["is_processing"] and s["n_ctx"] == CTX for s in slots))
        # One slot holds that conversation: its prompt and the tokens generated before the last.
        self.assertIn(want, [s["n_past"] for s in slots])
        self.assertTrue(any(s["kv_bytes"] > 0 for s in slots))

    def test_props_and_health(self):
        props = json.loads(self.server.get("/props"))
        self.assertEqual(props["total_slots"], 2)
        self.assertEqual(props["default_generation_settings"]["n_ctx"], CTX)
        with open(CHATML) as f:
            self.assertEqual(props["chat_template"], f.read())
        self.assertEqual(json.loads(self.server.get("/v1/health")), {"status": "ok"})

    def test_unknown_and_bad_fields_are_400(self):
        for body, param in (({"prompt": "x", "top_n_sigma": 1.0}, "top_n_sigma"), ({"prompt": "x", "n_predict": -2}, "n_predict"),
                            ({"prompt": "x", "id_slot": 1}, "id_slot"), ({"n_predict": 2}, "prompt"),
                            ({"prompt": "x", "logit_bias": [[1, True]]}, "logit_bias")):
            status, r = post(self.server, "/completion", body)
            self.assertEqual(status, 400, r)
            self.assertEqual(r["error"]["param"], param, r)


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class Conventions(unittest.TestCase):
    def test_aliases_and_an_inline_template(self):
        # llama-server's --alias takes several names; --chat-template takes a template's text.
        server = Server(STORIES, "-c", "256", "-t", "1", "--alias", "first, second",
                        "--chat-template", "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}")
        try:
            models = json.loads(server.get("/v1/models"))
            self.assertEqual([m["id"] for m in models["data"]], ["first", "second"])
            status, r = post(server, "/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
            self.assertEqual((status, r["prompt"]), (200, "[user]hi"))
        finally:
            server.stop()


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class Cors(unittest.TestCase):
    def test_listed_origins_only(self):
        import http.client
        server = Server(STORIES, "-c", "256", "-t", "1", "--api-key", "k", "--cors-origins", "http://good.example, http://also.example")

        def call(method, path, headers, body=None):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            r.read()
            conn.close()
            return r.status, {k.lower(): v for k, v in r.getheaders()}

        try:
            pre = {"Origin": "http://good.example", "Access-Control-Request-Method": "POST",
                   "Access-Control-Request-Headers": "authorization,content-type"}
            status, h = call("OPTIONS", "/v1/completions", pre)
            self.assertEqual(status, 204)
            self.assertEqual(h["access-control-allow-origin"], "http://good.example")
            self.assertEqual(h["access-control-allow-headers"], "authorization,content-type")
            self.assertIn("POST", h["access-control-allow-methods"])
            status, h = call("OPTIONS", "/v1/completions", {**pre, "Origin": "http://evil.example"})
            self.assertEqual(status, 403)
            self.assertNotIn("access-control-allow-origin", h)
            body = json.dumps({"prompt": "Once", "max_tokens": 2})
            for origin, allowed in (("http://also.example", True), ("http://evil.example", False)):
                status, h = call("POST", "/v1/completions", {"Origin": origin, "Authorization": "Bearer k"}, body)
                self.assertEqual(status, 200)
                self.assertEqual(h.get("access-control-allow-origin"), origin if allowed else None)
            status, h = call("POST", "/v1/completions", {"Origin": "http://good.example"}, body)  # no key
            self.assertEqual((status, h.get("access-control-allow-origin")), (401, "http://good.example"))
            status, h = call("GET", "/health", {"Origin": "http://good.example"})
            self.assertEqual((status, h.get("access-control-allow-origin")), (200, "http://good.example"))
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
