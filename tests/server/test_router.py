"""Router mode (slake-server without -m): the models of --models-dir and --models-preset behind one
server, each request routed by its "model". Requests for two models, interleaved from threads, get
the replies single-model servers give (temperature 0); --models-max and --models-memory unload the
least recently used idle model, and the memory the loaded models plan stays under the limit; a
model serving a request is not unloaded for another (503); unknown, missing and unloaded models,
bad presets and a model too large for the limit are refused by name. Models: stories260K and
SmolLM2 (stories260K under a second name where SmolLM2 is missing)."""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import unittest
import urllib.request

from harness import BACKEND, BIN, EMU, SMOLLM2, STORIES, Server

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park", "One day, a big bird"]
FLAGS = ("-c", "512", "-np", "2", "-t", "2", "--cache-ram", "4")


def complete(server, model, prompt, n=24):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0}
    if model:
        body["model"] = model
    status, r = server.call("/v1/completions", body)
    assert status == 200, r
    return r["choices"][0]["text"], r["usage"]["completion_tokens"]


def models(server):
    status, r = server.call("/models")
    assert status == 200, r
    return {m["id"]: m for m in r["data"]}


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
@unittest.skipIf(BACKEND != "cpu", "router mode is tested on the cpu backend")
class Router(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.second = SMOLLM2 if os.path.exists(SMOLLM2) else STORIES
        os.symlink(STORIES, os.path.join(self.dir, "stories.gguf"))
        os.symlink(self.second, os.path.join(self.dir, "second.gguf"))
        os.mkdir(os.path.join(self.dir, "folder"))  # a model in a folder of its own, named after it
        os.symlink(STORIES, os.path.join(self.dir, "folder", "stories260K.gguf"))
        os.symlink(STORIES, os.path.join(self.dir, "mmproj-x.gguf"))  # a projector: not a model
        self.paths = {"stories": STORIES, "second": self.second, "folder": STORIES}

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_two_models_interleaved_give_the_single_servers_replies(self):
        want = {}
        for name in ("stories", "second"):
            single = Server(self.paths[name], *FLAGS)
            try:
                want[name] = [complete(single, None, p) for p in PROMPTS]
            finally:
                single.stop()
        router = Server(None, "--models-dir", self.dir, *FLAGS)
        try:
            listed = models(router)
            self.assertEqual(sorted(listed), ["folder", "second", "stories"])
            self.assertTrue(all(m["status"]["value"] == "unloaded" for m in listed.values()))
            self.assertEqual(listed["folder"]["path"], os.path.join(self.dir, "folder", "stories260K.gguf"))
            got, errors = {}, []

            def run(name, i):
                try:
                    got[(name, i)] = complete(router, name, PROMPTS[i])
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(f"{name} {i}: {e}")

            threads = [threading.Thread(target=run, args=(name, i)) for i in range(len(PROMPTS)) for name in ("stories", "second")]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            self.assertEqual(errors, [])
            for name in ("stories", "second"):
                self.assertEqual([got[(name, i)] for i in range(len(PROMPTS))], want[name], name)
            listed = models(router)
            for name in ("stories", "second"):
                self.assertEqual(listed[name]["status"]["value"], "loaded")
                self.assertGreater(listed[name]["planned_bytes"], 0)
                self.assertEqual(listed[name]["status"]["args"][:3], ["slake-server", "-m", os.path.join(self.dir, name + ".gguf")])
            self.assertEqual(listed["folder"]["status"]["value"], "unloaded")
            # GET endpoints take the model from ?model=, percent-encoded.
            status, props = router.call("/props?model=st%6Fries")
            self.assertEqual(status, 200, props)
            self.assertEqual(props["model_path"], os.path.join(self.dir, "stories.gguf"))
            self.assertEqual(router.metric("slake_models_loaded"), 2)
        finally:
            router.stop()

    def test_lru_unloads_under_models_max_and_models_memory(self):
        router = Server(None, "--models-dir", self.dir, "--models-max", "1", *FLAGS)
        try:
            first = complete(router, "stories", PROMPTS[0])
            complete(router, "second", PROMPTS[0])
            listed = models(router)
            self.assertEqual((listed["stories"]["status"]["value"], listed["second"]["status"]["value"]), ("unloaded", "loaded"))
            self.assertEqual((router.metric("slake_model_loads_total"), router.metric("slake_model_unloads_total")), (2, 1))
            self.assertEqual(complete(router, "stories", PROMPTS[0]), first)  # loaded again, same reply
            plan = {name: models(router)[name]["planned_bytes"] for name in ("stories",)}
            complete(router, "second", PROMPTS[0])
            plan["second"] = models(router)["second"]["planned_bytes"]
        finally:
            router.stop()
        # Memory: room for the larger of the two, not for both.
        limit = max(plan.values()) + min(plan.values()) // 2
        router = Server(None, "--models-dir", self.dir, "--models-memory", str(limit / 1048576), *FLAGS)
        try:
            rss0 = router.metric("slake_process_resident_bytes")
            for name in ("stories", "second", "stories", "second"):
                complete(router, name, PROMPTS[1])
                loaded = [m for m in models(router).values() if m["status"]["value"] == "loaded"]
                self.assertEqual([m["id"] for m in loaded], [name])
                self.assertLessEqual(router.metric("slake_models_planned_bytes"), limit)
                # What the process holds beyond its start stays within what the loaded model plans.
                self.assertLessEqual(router.metric("slake_process_resident_bytes") - rss0, limit)
            self.assertEqual(router.metric("slake_model_unloads_total"), 3)
        finally:
            router.stop()
        # A limit between the two plans: the larger model is refused by name, the smaller still served.
        if plan["second"] > 2 * plan["stories"]:
            limit = (plan["stories"] + plan["second"]) // 2
            router = Server(None, "--models-dir", self.dir, "--models-memory", str(limit / 1048576), *FLAGS)
            try:
                status, err = router.call("/v1/completions", {"model": "second", "prompt": "x", "max_tokens": 1})
                self.assertEqual((status, err["error"]["code"]), (400, "model_too_large"), err)
                self.assertIn("--models-memory", err["error"]["message"])
                self.assertEqual(complete(router, "stories", PROMPTS[0]), first)
            finally:
                router.stop()

    @unittest.skipUnless(os.path.exists(SMOLLM2), "needs SmolLM2 for a request that runs long enough")
    def test_a_model_serving_a_request_is_not_unloaded_for_another(self):
        router = Server(None, "--models-dir", self.dir, "--models-max", "1", *FLAGS)
        try:
            complete(router, "second", "Hi", 1)
            req = urllib.request.Request(router.url + "/v1/completions", headers={"Content-Type": "application/json"},
                                         data=json.dumps({"model": "second", "prompt": "Once upon a time", "max_tokens": 2000,
                                                          "temperature": 0, "stream": True, "ignore_eos": True}).encode())
            with urllib.request.urlopen(req, timeout=120) as stream:
                stream.readline()  # the first event: the request is running
                status, err = router.call("/v1/completions", {"model": "stories", "prompt": "x", "max_tokens": 1})
                self.assertEqual((status, err["error"]["code"]), (503, "models_busy"), err)
                stream.read()
            self.assertEqual(complete(router, "stories", PROMPTS[0])[1], 24)  # idle now: unloaded for stories
        finally:
            router.stop()

    def test_requests_and_presets_refused_by_name(self):
        preset = os.path.join(self.dir, "models.ini")
        # [*] < a model's section < the command line, whatever spelling each uses; llama-server's
        # flags that change nothing here are accepted; the router's own (port) is dropped.
        with open(preset, "w") as f:
            f.write(f"version = 1\n[*]\nc = 256\nnp = 1\nkvu = true\njinja = true\nfa = on\nn-gpu-layers = 99\nport = 1\n\n"
                    f"[custom]\nmodel = {STORIES}\nkv-policy = slake\nkv-budget = 64\nload-on-startup = true\nparallel = 3\n\n"
                    "[stories]\nctx-size = 384\nkv-unified = false\n")
        router = Server(None, "--models-dir", self.dir, "--models-preset", preset, "--no-models-autoload", "-t", "2", "-np", "2")
        try:
            listed = models(router)
            self.assertEqual(sorted(listed), ["custom", "folder", "second", "stories"])
            self.assertEqual(listed["custom"]["status"]["value"], "loaded")  # load-on-startup
            args = listed["custom"]["status"]["args"]
            self.assertEqual(args[:3], ["slake-server", "-m", STORIES])
            for a in ("-c", "256", "--kv-unified", "--kv-policy", "slake", "--kv-budget", "64", "--parallel", "3", "-np", "2"):
                self.assertIn(a, args)
            self.assertEqual(args.count("--port"), 1)  # the router's own flag, dropped from the preset
            # Its section's ctx-size and kv-unified replace [*]'s c and kvu.
            stories = listed["stories"]["status"]["args"]
            self.assertNotIn("256", stories)
            self.assertNotIn("--kv-unified", stories)
            for a in ("--ctx-size", "384", "--no-kv-unified"):
                self.assertIn(a, stories)
            status, slots = router.call("/slots?model=custom")
            self.assertEqual(len(slots), 2)  # -np 2 on the command line over the section's parallel = 3
            status, props = router.call("/props?model=custom")
            self.assertEqual(props["default_generation_settings"]["n_ctx"], 256)  # [*]'s c, unified: each slot all of it
            # An endpoint no model serves, or a wrong method, is refused before any model loads.
            self.assertEqual(router.call("/v1/nope", {"model": "stories"})[0], 404)
            self.assertEqual(router.call("/v1/completions?model=stories")[0], 405)
            for body, code, param in (({"prompt": "x"}, 400, "model"),
                                      ({"model": "nope", "prompt": "x"}, 404, "model"),
                                      ({"model": "stories", "prompt": "x"}, 400, "model")):  # not loaded, no autoload
                status, err = router.call("/v1/completions", body)
                self.assertEqual((status, err["error"]["param"]), (code, param), err)
            self.assertEqual(router.call("/props")[0], 400)
            self.assertEqual(models(router)["stories"]["status"]["value"], "unloaded")
            self.assertEqual(router.call("/models/load", {"model": "stories"}), (200, {"success": True}))
            status, props = router.call("/props?model=stories")
            self.assertEqual(props["default_generation_settings"]["n_ctx"], 192)  # its section's 384 over 2 slots, not unified
            complete(router, "stories", "x", 2)
            self.assertEqual(router.call("/models/unload", {"model": "stories"}), (200, {"success": True}))
            self.assertEqual(models(router)["stories"]["status"]["value"], "unloaded")
            self.assertEqual(router.call("/models/unload", {"model": "stories"})[0], 400)
            self.assertEqual(router.call("/models/load", {"model": "nope"})[0], 404)
            # ?autoload=true loads it for this request.
            status, r = router.call("/v1/completions?autoload=true", {"model": "stories", "prompt": "x", "max_tokens": 2})
            self.assertEqual(status, 200, r)
        finally:
            router.stop()
        server = os.path.join(BIN, "slake-server" + EMU)
        bad = [(f"[*]\nno-such-flag = 1\n[custom]\nmodel = {STORIES}\n", "no-such-flag"), ("[lost]\nc = 5\n", "[lost]"), ("c = 5\n", "outside a section"),
               ("[custom]\nmodel = /nonexistent.gguf\nload-on-startup = true\n", "nonexistent")]
        for text, why in bad:
            with open(preset, "w") as f:
                f.write(text)
            out = subprocess.run([server, "--models-preset", preset, "--port", "0"], capture_output=True, timeout=60)
            self.assertNotEqual(out.returncode, 0, text)
            self.assertIn(why, out.stderr.decode(), text)
        out = subprocess.run([server, "--port", "0"], capture_output=True, timeout=60)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("--models-dir", out.stderr.decode())


if __name__ == "__main__":
    unittest.main()
