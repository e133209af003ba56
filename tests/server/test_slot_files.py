"""llama-server's slot files (POST /slots/N?action=save|restore|erase with --slot-save-path) over
raw HTTP: a slot saved under SLAKE with a quantised cache (SmolLM2, q8_0; stories260K, f16, where
SmolLM2 is missing) and restored into a fresh server continues a conversation with the tokens the
unsaved slot gives, its prompt found cached; a damaged file, a file of another model, a file name
with a directory, an unknown action and a server without --slot-save-path are refused; erase
empties the slot."""
import json
import os
import shutil
import tempfile
import unittest
import urllib.request

from harness import BACKEND, SMOLLM2, STORIES, Server

FIRST = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends "
         "and her dog, who was big and brown and liked to run after the ball.")


def post(server, path, body):
    return server.call(path, body)


def complete(server, prompt, n=16):
    status, r = post(server, "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
    assert status == 200, r
    return r["choices"][0]["text"], r["usage"]["prompt_tokens_details"]["cached_tokens"]


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
@unittest.skipIf(BACKEND != "cpu", "slot files hold a cpu session's state")
class SlotFiles(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.model = SMOLLM2 if os.path.exists(SMOLLM2) else STORIES
        cache = ("-ctk", "q8_0", "-ctv", "q8_0") if self.model == SMOLLM2 else ()
        self.flags = ("-c", "1024", "-np", "1", "-t", "2", "--kv-policy", "slake", "--kv-budget", "48", *cache,
                      "--slot-save-path", self.dir)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_a_restored_slot_continues_as_the_saved_one(self):
        a = Server(self.model, *self.flags)
        try:
            reply, _ = complete(a, FIRST)
            status, saved = post(a, "/slots/0?action=save", {"filename": "lily.bin"})
            self.assertEqual(status, 200, saved)
            self.assertEqual((saved["id_slot"], saved["filename"]), (0, "lily.bin"))
            self.assertGreater(saved["n_saved"], 0)
            self.assertEqual(saved["n_written"], os.path.getsize(os.path.join(self.dir, "lily.bin")))
            turn = FIRST + reply + " Then she went home."
            want, cached_a = complete(a, turn)
            self.assertGreater(cached_a, 0)
        finally:
            a.stop()
        b = Server(self.model, *self.flags)
        try:
            status, restored = post(b, "/slots/0?action=restore", {"filename": "lily.bin"})
            self.assertEqual(status, 200, restored)
            self.assertEqual(restored["n_restored"], saved["n_saved"])
            got, cached_b = complete(b, turn)
            self.assertEqual((got, cached_b), (want, cached_a))
            # Damaged: one byte flipped.
            with open(os.path.join(self.dir, "lily.bin"), "rb") as f:
                data = bytearray(f.read())
            data[len(data) // 2] ^= 0x20
            with open(os.path.join(self.dir, "bad.bin"), "wb") as f:
                f.write(data)
            status, err = post(b, "/slots/0?action=restore", {"filename": "bad.bin"})
            self.assertEqual(status, 400)
            self.assertIn("checksum", err["error"]["message"])
            for name in ("../lily.bin", "sub/x.bin", ".hidden", ""):
                status, err = post(b, "/slots/0?action=save", {"filename": name})
                self.assertEqual((status, err["error"]["param"]), (400, "filename"), name)
            status, err = post(b, "/slots/0?action=restore", {"filename": "missing.bin"})
            self.assertEqual(status, 400)
            status, err = post(b, "/slots/0?action=frobnicate", {"filename": "x.bin"})
            self.assertEqual((status, err["error"]["param"]), (400, "action"))
            status, erased = post(b, "/slots/0?action=erase", {})
            self.assertEqual((status, erased["id_slot"]), (200, 0))
            self.assertGreater(erased["n_erased"], 0)
            with urllib.request.urlopen(b.url + "/slots", timeout=30) as r:
                self.assertEqual(json.loads(r.read())[0]["n_past"], 0)
            status, err = post(b, "/slots/1?action=erase", {})
            self.assertEqual(status, 404)  # one slot: /slots/1 is no endpoint
        finally:
            b.stop()

    def test_a_file_of_another_model_or_server_is_refused(self):
        other = STORIES if self.model == SMOLLM2 else None
        a = Server(self.model, *self.flags)
        try:
            complete(a, FIRST)
            self.assertEqual(post(a, "/slots/0?action=save", {"filename": "a.bin"})[0], 200)
        finally:
            a.stop()
        plain = Server(self.model, "-c", "1024", "-np", "1", "-t", "2")
        try:
            status, err = post(plain, "/slots/0?action=save", {"filename": "a.bin"})
            self.assertEqual(status, 501)
            self.assertIn("--slot-save-path", err["error"]["message"])
        finally:
            plain.stop()
        if other:
            c = Server(other, "-c", "1024", "-np", "1", "-t", "2", "--slot-save-path", self.dir)
            try:
                status, err = post(c, "/slots/0?action=restore", {"filename": "a.bin"})
                self.assertEqual(status, 400)
                self.assertIn("another model", err["error"]["message"])
            finally:
                c.stop()


if __name__ == "__main__":
    unittest.main()
