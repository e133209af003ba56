"""slake-server through the official openai client, on stories260K (and SmolLM2 where
scripts/fetch-models.sh fetched it): greedy replies, streamed and not, equal slake-cli --temp 0's
text for the same prompt and token count, alone and with 8 requests at once (so batched decoding
changes nothing); conversations reuse the slot's cache; the error bodies of bad requests (400),
a wrong API key (401) and a full queue (503); a client that leaves mid-stream frees its slot;
SIGTERM stops the server. With SLAKE_BACKEND=cuda (harness.py) the server and slake-cli run
--backend cuda on the host executor; ctest server_openai_cuda_emu runs the short-prompt classes so."""
import concurrent.futures
import json
import os
import socket
import time
import unittest
import urllib.error
import urllib.request

import openai

from harness import BACKEND, CHATML, SMOLLM2, STORIES, Server, cli_greedy

CTX = 256
N = 24
PROMPTS = ["Once upon a time", "The little dog", "Tom and Lily went to the park", "One day, a bird",
           "The sun was hot and", "Sara had a red ball", "In the forest there", "Mom said"]
CHAT_MESSAGES = ["Hi there", "Tell me a story", "What is a cat?", "Hello"]


def client(server, key="none"):
    # The host executor (SLAKE_BACKEND=cuda) takes about a second per short reply, and requests
    # queued behind others wait for them.
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=300 if BACKEND == "cuda" else 60)


def complete(c, model, prompt, n, stream, chat):
    """The reply's text, and the finish reason, through the client."""
    if chat:
        kw = dict(model=model, messages=[{"role": "user", "content": prompt}], max_tokens=n, temperature=0)
        if not stream:
            r = c.chat.completions.create(**kw)
            return r.choices[0].message.content, r.choices[0].finish_reason
        text, finish = "", None
        for ch in c.chat.completions.create(stream=True, **kw):
            if ch.choices:
                text += ch.choices[0].delta.content or ""
                finish = ch.choices[0].finish_reason or finish
        return text, finish
    kw = dict(model=model, prompt=prompt, max_tokens=n, temperature=0)
    if not stream:
        r = c.completions.create(**kw)
        return r.choices[0].text, r.choices[0].finish_reason
    text, finish = "", None
    for ch in c.completions.create(stream=True, **kw):
        text += ch.choices[0].text
        finish = ch.choices[0].finish_reason or finish
    return text, finish


def post(server, path, body, key=None):
    """Status and JSON body of a raw POST (bodies the client would refuse to send)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class GreedyMatchesCli:
    """Mixed into a TestCase with MODEL, ARGS, CLI_ARGS, CHAT."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(cls.MODEL, "-c", str(8 * CTX), "-np", "8", "-t", "2", *cls.ARGS)
        cls.model = os.path.basename(cls.MODEL)
        prompts = CHAT_MESSAGES if cls.CHAT else PROMPTS
        cls.want = {p: cli_greedy(cls.MODEL, p, N, CTX, *cls.CLI_ARGS) for p in prompts}

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_one_at_a_time(self):
        c = client(self.server)
        for p, want in list(self.want.items())[:3]:
            for stream in (False, True):
                text, finish = complete(c, self.model, p, N, stream, self.CHAT)
                self.assertEqual(text, want, f"{p!r}, stream={stream}")
                self.assertIn(finish, ("length", "stop"))

    def test_eight_at_once(self):
        jobs = [(p, i % 2 == 1) for i, p in enumerate(list(self.want) * 2)][:8]
        c = client(self.server)
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            got = list(ex.map(lambda j: complete(c, self.model, j[0], N, j[1], self.CHAT)[0], jobs))
        for (p, stream), text in zip(jobs, got):
            self.assertEqual(text, self.want[p], f"{p!r}, stream={stream}")
        # They ran together: some decode step held more than one sequence.
        self.assertGreater(self.server.metric("slake_decode_rows_total"), self.server.metric("slake_decode_steps_total"))


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class StoriesCompletions(GreedyMatchesCli, unittest.TestCase):
    MODEL, ARGS, CLI_ARGS, CHAT = STORIES, (), (), False


@unittest.skipUnless(os.path.exists(STORIES) and os.path.exists(CHATML), "shared material missing: stories260K or the ChatML template")
class StoriesChat(GreedyMatchesCli, unittest.TestCase):
    MODEL, ARGS, CLI_ARGS, CHAT = STORIES, ("--chat-template-file", CHATML), ("--chat-template-file", CHATML), True


@unittest.skipUnless(os.path.exists(SMOLLM2), f"model missing: {SMOLLM2} (scripts/fetch-models.sh fetches it)")
class SmolLM2Chat(GreedyMatchesCli, unittest.TestCase):
    MODEL, ARGS, CLI_ARGS, CHAT = SMOLLM2, (), ("--jinja",), True  # slake-cli: the model's own template


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class Behaviour(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(STORIES, "-c", str(2 * CTX), "-np", "2", "-t", "2")
        cls.model = os.path.basename(STORIES)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_models_health_tokenize(self):
        models = client(self.server).models.list()
        self.assertEqual([m.id for m in models.data], [self.model])
        self.assertEqual(json.loads(self.server.get("/health")), {"status": "ok"})
        status, tok = post(self.server, "/tokenize", {"content": "Once upon a time"})
        self.assertEqual(status, 200)
        status, text = post(self.server, "/detokenize", {"tokens": tok["tokens"]})
        self.assertEqual(text["content"], "Once upon a time")

    def test_usage_stop_logprobs_seed(self):
        c = client(self.server)
        r = c.completions.create(model=self.model, prompt="Once upon a time", max_tokens=N, temperature=0, logprobs=3)
        self.assertEqual(r.usage.completion_tokens, N)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + N)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), N)
        self.assertEqual("".join(lp.tokens), r.choices[0].text)
        for tok, top in zip(lp.tokens, lp.top_logprobs):  # greedy: the token is the most probable
            self.assertEqual(len(top), 3)
            self.assertEqual(max(top, key=top.get), tok)
        # A stop string cuts the reply before it, streamed or not.
        text = r.choices[0].text
        stop = text[10:14]
        for stream in (False, True):
            if stream:
                got = "".join(ch.choices[0].text for ch in c.completions.create(
                    model=self.model, prompt="Once upon a time", max_tokens=N, temperature=0, stop=[stop], stream=True))
            else:
                got = c.completions.create(model=self.model, prompt="Once upon a time", max_tokens=N, temperature=0,
                                           stop=[stop]).choices[0].text
            self.assertEqual(got, text[:text.index(stop)])
        # ignore_eos: the reply runs to max_tokens.
        r = c.completions.create(model=self.model, prompt="Once upon a time", max_tokens=150, temperature=1.0, seed=3,
                                 extra_body={"ignore_eos": True})
        self.assertEqual((r.usage.completion_tokens, r.choices[0].finish_reason), (150, "length"))
        # Sampling with a seed repeats itself.
        a, b = (c.completions.create(model=self.model, prompt="Once upon a time", max_tokens=N, temperature=1.0,
                                     seed=42).choices[0].text for _ in range(2))
        self.assertEqual(a, b)
        # A streamed reply's last chunk has the usage, when asked for.
        chunks = list(c.completions.create(model=self.model, prompt="Once upon a time", max_tokens=5, temperature=0,
                                           stream=True, stream_options={"include_usage": True}))
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 5)
        self.assertEqual(chunks[-1].usage.prompt_tokens, r.usage.prompt_tokens)

    def test_n_choices_share_one_prefill(self):
        """n > 1: choice i is what one request with seed + i gives; the prompt is prefilled once
        while a slot is free for each choice (the server has 2; on cpu), and a choice that waited
        for a slot prefills it alone, to the same result."""
        c = client(self.server)
        prompt = "Once upon a time, there was a little girl named Lily. She"
        kw = dict(model=self.model, prompt=prompt, max_tokens=N, temperature=1.0)
        single = [c.completions.create(seed=7 + i, **kw) for i in range(2)]
        metrics = ("slake_prefill_chunks_total", "slake_prompt_tokens_cached_total")
        before = [self.server.metric(m) for m in metrics]
        r = c.completions.create(seed=7, n=2, **kw)
        after = [self.server.metric(m) for m in metrics]
        self.assertEqual([ch.index for ch in r.choices], [0, 1])
        self.assertEqual([ch.text for ch in r.choices], [s.choices[0].text for s in single])
        self.assertNotEqual(r.choices[0].text, r.choices[1].text)  # the seeds differ
        self.assertEqual(r.usage.prompt_tokens, single[0].usage.prompt_tokens)
        self.assertEqual(r.usage.completion_tokens, sum(s.usage.completion_tokens for s in single))
        if BACKEND == "cpu":  # a device session cannot copy a cache yet: each choice prefills
            self.assertEqual(after[0] - before[0], 1, "the follower prefilled the prompt again")
            self.assertEqual(after[1] - before[1], r.usage.prompt_tokens, "the follower did not take the leader's cache")
        # Streamed, three choices on two slots: each index streams its own reply and ends.
        texts, finish = ["", "", ""], [None, None, None]
        chunks = list(c.completions.create(seed=7, n=3, stream=True, stream_options={"include_usage": True}, **kw))
        for ch in chunks[:-1]:
            for x in ch.choices:
                texts[x.index] += x.text
                finish[x.index] = x.finish_reason or finish[x.index]
        third = c.completions.create(seed=9, **kw)
        self.assertEqual(texts, [r.choices[0].text, r.choices[1].text, third.choices[0].text])
        self.assertTrue(all(f in ("length", "stop") for f in finish), finish)
        self.assertEqual(chunks[-1].usage.completion_tokens, r.usage.completion_tokens + third.usage.completion_tokens)

    def test_conversation_reuses_the_cache(self):
        c = client(self.server)
        _, tok = post(self.server, "/tokenize", {"content": "Once upon a time, there was a dog", "add_special": True})
        first = tok["tokens"]
        r1 = c.completions.create(model=self.model, prompt=first, max_tokens=8, temperature=0,
                                  extra_body={"return_tokens": True})
        self.assertEqual(r1.usage.prompt_tokens_details.cached_tokens, 0)
        reply = r1.choices[0].model_extra["tokens"]
        self.assertEqual(len(reply), 8)
        _, more = post(self.server, "/tokenize", {"content": " and a cat."})
        # The prompt continues the slot's history (prompt and reply; the reply's last token was
        # sampled, never evaluated): only the new tokens are prefilled.
        second = first + reply + more["tokens"]
        r2 = c.completions.create(model=self.model, prompt=second, max_tokens=8, temperature=0)
        self.assertEqual(r2.usage.prompt_tokens_details.cached_tokens, len(first) + len(reply) - 1)
        # A prompt that does not continue any slot's history starts from an empty cache.
        r3 = c.completions.create(model=self.model, prompt=first[:3] + more["tokens"], max_tokens=8, temperature=0)
        self.assertEqual(r3.usage.prompt_tokens_details.cached_tokens, 0)

    @unittest.skipUnless(BACKEND == "cuda", "the cpu backend runs every policy")
    def test_policy_the_device_lacks_fails_alone(self):
        # The device refuses h2o when the slot's context is built: that request fails with the
        # reason, and the slot, back on its old policy, serves the next one.
        status, body = post(self.server, "/v1/completions", {"prompt": " ".join(PROMPTS * 3), "max_tokens": 2,
                                                             "kv_policy": "h2o", "kv_budget": 32, "kv_window": 8})
        self.assertNotEqual(status, 200)
        self.assertIn("h2o", body["error"]["message"])
        for _ in range(3):  # every slot, whichever took the failed request
            r = client(self.server).completions.create(model=self.model, prompt="Once upon a time", max_tokens=4, temperature=0)
            self.assertEqual(r.usage.completion_tokens, 4)

    def test_kv_policy_per_request(self):
        c = client(self.server)
        long_prompt = " ".join(PROMPTS * 3)
        r = c.completions.create(model=self.model, prompt=long_prompt, max_tokens=N, temperature=0,
                                 extra_body={"kv_policy": "slake", "kv_budget": 32, "kv_window": 8})
        self.assertEqual(r.usage.completion_tokens, N)
        status, body = post(self.server, "/v1/completions", {"prompt": "x", "kv_policy": "nope"})
        self.assertEqual(status, 400)
        self.assertIn("nope", body["error"]["message"])

    def test_bad_requests_are_400(self):
        cases = [
            (b"{not json", "not valid JSON", None),
            (b"[1, 2]", "must be a JSON object", None),
            (b"[" * 200000 + b"]" * 200000, "must be a JSON object", None),  # deep nesting: no stack overflow
            ({"prompt": "x", "max_tokens": "ten"}, "'max_tokens' must be an integer", "max_tokens"),
            ({"prompt": "x", "temperature": "hot"}, "'temperature' must be a number", "temperature"),
            ({"prompt": "x", "stream": 1}, "'stream' must be a boolean", "stream"),
            ({"prompt": "x", "model": 4}, "'model' must be a string", "model"),
            ({"prompt": "x", "n": 9}, "'n' must be in [1, 8]", "n"),
            ({"prompt": "x", "top_p": 0}, "top_p", "top_p"),
            ({"prompt": "x", "stop": [1]}, "'stop' must hold strings", "stop"),
            ({"prompt": 5}, "'prompt' must be a string", "prompt"),
            ({"max_tokens": 3}, "'prompt' is required", "prompt"),
            ({"prompt": "word " * 400}, "leaves no room in the context", "prompt"),
        ]
        for body, message, param in cases:
            status, err = post(self.server, "/v1/completions", body)
            self.assertEqual(status, 400, body)
            self.assertEqual(err["error"]["type"], "invalid_request_error")
            self.assertIn(message, err["error"]["message"])
            self.assertEqual(err["error"]["param"], param)
        # As llama-server: any model name is served (and echoed), and a model without a chat
        # template (stories260K, no --chat-template given) chats in ChatML.
        status, body = post(self.server, "/v1/completions", {"prompt": "x", "model": "gpt-4", "max_tokens": 2})
        self.assertEqual((status, body["model"]), (200, "gpt-4"))
        status, body = post(self.server, "/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
        self.assertEqual((status, body["prompt"]), (200, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"))
        status, err = post(self.server, "/v1/chat/completions", {"messages": "hi"})
        self.assertEqual((status, err["error"]["param"]), (400, "messages"))
        # Through the client: its BadRequestError.
        with self.assertRaises(openai.BadRequestError) as cm:
            client(self.server).completions.create(model=self.model, prompt="x", n=9)
        self.assertEqual(cm.exception.status_code, 400)
        self.assertEqual(json.loads(self.server.get("/health")), {"status": "ok"})

    def test_disconnect_frees_the_slot(self):
        before = self.server.metric('slake_requests_total{outcome="cancelled"}')
        s = socket.create_connection(("127.0.0.1", self.server.port))
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 200, "temperature": 1.0, "stream": True,
                           "ignore_eos": True})
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        got = b""
        while b"data: " not in got:
            got += s.recv(4096)
        s.close()
        deadline = time.time() + 5
        while time.time() < deadline and self.server.metric('slake_requests_total{outcome="cancelled"}') == before:
            time.sleep(0.02)
        self.assertEqual(self.server.metric('slake_requests_total{outcome="cancelled"}'), before + 1)
        self.assertEqual(self.server.metric("slake_slots_busy"), 0)


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class LongPromptsAndPolicies(unittest.TestCase):
    """A prompt of several n_batch chunks is prefilled a chunk per step while other replies decode,
    and a request's own KV policy evicts in its slot alone: greedy text still equals slake-cli's."""
    CTX = 1024

    @classmethod
    def setUpClass(cls):
        cls.server = Server(STORIES, "-c", str(4 * cls.CTX), "-np", "4", "-t", "2")
        cls.long = " ".join(PROMPTS * 9)  # about 600 tokens: chunks of 256, 256 and the rest

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def beside_running_replies(self, server):
        """The long prompt's greedy reply, sent while two streamed replies run."""
        c = client(server)
        with concurrent.futures.ThreadPoolExecutor(3) as ex:
            others = [ex.submit(complete, c, "stories260K.gguf", p, 120, True, False) for p in PROMPTS[:2]]
            time.sleep(0.05)
            got = ex.submit(complete, c, "stories260K.gguf", self.long, N, False, False).result()[0]
            [o.result() for o in others]
        return got

    def test_long_prompt_beside_running_replies(self):
        want = cli_greedy(STORIES, self.long, N, self.CTX)
        self.assertEqual(self.beside_running_replies(self.server), want)
        self.assertGreaterEqual(self.server.metric("slake_prefill_chunks_total"), 3)

    def test_prefill_in_chunks_beside_running_replies(self):
        # --prefill-chunk: an evicting policy's long prompt goes one chunk per scheduler step, each
        # chunk evicted before the next, beside running replies; the greedy text equals slake-cli's
        # with the same flags, given as server flags or as the request's kv fields.
        flags = ("--kv-policy", "snapkv", "--kv-budget", "64", "--kv-window", "16", "--prefill-chunk", "128")
        want = cli_greedy(STORIES, self.long, N, self.CTX, *flags)
        server = Server(STORIES, "-c", str(3 * self.CTX), "-np", "3", "-t", "2", *flags)
        try:
            before = server.metric("slake_prefill_chunks_total")
            self.assertEqual(self.beside_running_replies(server), want)
            # About 600 tokens in chunks of 128 (the rest under a chunk and a window joins the last),
            # and one step for each short prompt.
            self.assertGreaterEqual(server.metric("slake_prefill_chunks_total") - before, 4 + 2)
        finally:
            server.stop()
        extra = {"kv_policy": "snapkv", "kv_budget": 64, "kv_window": 16, "kv_prefill_chunk": 128}
        got = client(self.server).completions.create(model="stories260K.gguf", prompt=self.long, max_tokens=N, temperature=0,
                                                     extra_body=extra).choices[0].text
        self.assertEqual(got, want)

    def test_request_policy_equals_cli_flags(self):
        server = Server(STORIES, "-c", str(self.CTX), "-np", "1", "-t", "2")
        try:
            c = client(server)
            full = None
            # The slot is reused: each request's own policy (cake@ahakv and SRE-mass through their
            # request fields) must replace the one before.
            for policy in ("full", "slake", "h2o", "streaming", "ahakv", "cake@ahakv", "slake@sre:0.8"):
                name, _, sel = policy.partition("@")
                flags = ("--kv-policy", name, "--kv-budget", "64", "--kv-window", "16") if policy != "full" else ()
                extra = {"kv_policy": name, "kv_budget": 64, "kv_window": 16} if policy != "full" else {}
                if sel == "ahakv":
                    flags += ("--kv-selector", "ahakv")
                    extra["kv_selector"] = "ahakv"
                elif sel:
                    flags += ("--kv-sre-mass", "0.8")
                    extra["kv_sre_mass"] = 0.8
                want = cli_greedy(STORIES, self.long, N, self.CTX, *flags)
                got = c.completions.create(model="stories260K.gguf", prompt=self.long, max_tokens=N, temperature=0,
                                           extra_body=extra).choices[0].text
                self.assertEqual(got, want, policy)
                # The one slot's cache holds what the policy kept: far less than the full cache.
                kv = server.metric('slake_kv_bytes{slot="0"}')
                if policy == "full":
                    full = kv
                else:
                    self.assertLess(kv, full / 4, policy)
        finally:
            server.stop()

    def test_reused_slot_takes_each_requests_policy(self):
        # One slot serves a request, then one that differs in a single KV field: the second reply
        # must be a fresh server's, so the slot cannot keep the first request's evictor. Each
        # variant's reply differs from the base's here (so a slot that kept it would be caught).
        base = {"kv_policy": "slake", "kv_budget": 32, "kv_window": 16, "kv_observe": 0}
        variants = [{"kv_observe": 1}, {"kv_window": 8}, {"kv_budget": 48}, {"kv_policy": "snapkv"}]

        def reply(server, kv):
            return client(server).completions.create(model="stories260K.gguf", prompt=self.long, max_tokens=N, temperature=0,
                                                     extra_body=kv).choices[0].text

        def fresh(kv):
            server = Server(STORIES, "-c", str(self.CTX), "-np", "1", "-t", "2")
            try:
                return reply(server, kv)
            finally:
                server.stop()

        want_base = fresh(base)
        reused = Server(STORIES, "-c", str(self.CTX), "-np", "1", "-t", "2")
        try:
            for v in variants:
                kv = {**base, **v}
                want = fresh(kv)
                self.assertNotEqual(want, want_base, v)
                self.assertEqual(reply(reused, base), want_base, v)
                self.assertEqual(reply(reused, kv), want, v)
        finally:
            reused.stop()

    def test_request_budget_gets_its_own_policy_defaults(self):
        # The server's default slake-wide at C=512 widens its window to 256; a request asking for
        # C=64 gets slake-wide's window for C=64 (32), as slake-cli does, not the server's 256.
        server = Server(STORIES, "-c", str(self.CTX), "-np", "1", "-t", "2", "--kv-policy", "slake-wide", "--kv-budget", "512")
        try:
            want = cli_greedy(STORIES, self.long, N, self.CTX, "--kv-policy", "slake-wide", "--kv-budget", "64")
            got = client(server).completions.create(model="stories260K.gguf", prompt=self.long, max_tokens=N, temperature=0,
                                                    extra_body={"kv_budget": 64}).choices[0].text
            self.assertEqual(got, want)
        finally:
            server.stop()


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class AdmissionAndAuth(unittest.TestCase):
    def test_wrong_api_key_is_401(self):
        server = Server(STORIES, "-c", str(CTX), "--api-key", "sesame", "-t", "1")
        try:
            with self.assertRaises(openai.AuthenticationError) as cm:
                client(server, "wrong").completions.create(model="stories260K.gguf", prompt="x", max_tokens=2)
            self.assertEqual(cm.exception.status_code, 401)
            self.assertEqual(cm.exception.body["type"], "authentication_error")
            r = client(server, "sesame").completions.create(model="stories260K.gguf", prompt="x", max_tokens=2)
            self.assertEqual(r.usage.completion_tokens, 2)
            self.assertEqual(json.loads(server.get("/health")), {"status": "ok"})  # no key needed
        finally:
            server.stop()

    def test_full_queue_is_503_and_sigterm_stops(self):
        # A context of 4096 lets the busy reply run for seconds (220 tokens could end between the
        # two refused requests below); the stream is closed before it ends.
        server = Server(STORIES, "-c", "4096", "-np", "1", "--queue", "0", "-t", "1")
        try:
            c = client(server)
            stream = c.completions.create(model="stories260K.gguf", prompt="Once", max_tokens=4000, temperature=1.0,
                                          stream=True, extra_body={"ignore_eos": True})
            next(iter(stream))  # the only slot is busy now
            with self.assertRaises(openai.InternalServerError) as cm:
                c.completions.create(model="stories260K.gguf", prompt="x", max_tokens=2)
            self.assertEqual(cm.exception.status_code, 503)
            self.assertEqual(cm.exception.body["code"], "server_busy")
            self.assertIn("busy", cm.exception.body["message"])
            status, _ = post(server, "/v1/completions", {"prompt": "x", "max_tokens": 2})
            self.assertEqual(status, 503)
            stream.close()
        finally:
            t0 = time.time()
            rc = server.stop()
        self.assertEqual(rc, 0)
        self.assertLess(time.time() - t0, 8)  # within the HTTP keep-alive timeout (5 s) of idle connections

    def test_kv_memory_too_small_is_400_and_waits_otherwise(self):
        # 5 layers x 4 KV heads x (2 x 8 f16 values x 2 bytes + a 4-byte position) = 720 bytes a token:
        # 0.1 MiB is 145 tokens, one request of 5 + 96 at a time, not 5 + 200.
        server = Server(STORIES, "-c", str(4 * CTX), "-np", "4", "--kv-memory", "0.1", "-t", "1")
        try:
            status, err = post(server, "/v1/completions", {"prompt": "Once", "max_tokens": 200})
            self.assertEqual(status, 400)
            self.assertIn("--kv-memory", err["error"]["message"])
            # Four requests of 100 tokens each fit one at a time: all complete, none refused.
            c = client(server)
            with concurrent.futures.ThreadPoolExecutor(4) as ex:
                got = list(ex.map(lambda p: c.completions.create(model="stories260K.gguf", prompt=p, max_tokens=96,
                                                                 temperature=0).usage.completion_tokens, PROMPTS[:4]))
            self.assertEqual(got, [96] * 4)
            self.assertLessEqual(server.metric("slake_decode_rows_total"), server.metric("slake_decode_steps_total"))
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
