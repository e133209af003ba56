"""/v1/embeddings through the official openai client (which asks for base64) and raw HTTP (floats),
against transformers: a tiny random Llama's final hidden states by transformers
(tests/fixtures/models/llama-gqa-tied/hidden.json, models/make_embedding_reference.py), mean- and
last-pooled and L2-normalised as llama-server normalises them, within 1e-4; several inputs in one
request; bad inputs are 400s."""
import json
import math
import os
import unittest
import urllib.error
import urllib.request

import openai

from harness import Server

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "fixtures", "models", "llama-gqa-tied")


def close(a, b, tol=1e-4):
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= tol


@unittest.skipUnless(os.path.exists(os.path.join(FIXTURE, "hidden.json")), "fixture missing")
class Embeddings(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(FIXTURE, "hidden.json")) as f:
            cls.ref = json.load(f)

    def test_mean_and_last_pooling_match_transformers(self):
        for pooling, key in (("mean", "mean_l2"), ("last", "last_l2")):
            server = Server(os.path.join(FIXTURE, "model.gguf"), "-c", "64", "-t", "1", "--pooling", pooling,
                            "--chat-template", "chatml")
            try:
                client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=60)
                tokens = self.ref["tokens"]
                r = client.embeddings.create(model="m", input=[tokens, tokens[:8]])
                self.assertEqual(len(r.data), 2)
                self.assertTrue(close(r.data[0].embedding, self.ref[key]), pooling)
                self.assertAlmostEqual(math.sqrt(sum(x * x for x in r.data[1].embedding)), 1.0, places=5)
                self.assertEqual(r.usage.prompt_tokens, len(tokens) + 8)
                # Raw floats, the same numbers.
                req = urllib.request.Request(server.url + "/v1/embeddings",
                                             data=json.dumps({"input": tokens, "encoding_format": "float"}).encode())
                with urllib.request.urlopen(req, timeout=60) as resp:
                    raw = json.loads(resp.read())
                self.assertTrue(close(raw["data"][0]["embedding"], self.ref[key]), pooling)
                for bad, param in (({"input": []}, "input"), ({"input": [10 ** 6]}, "input"),
                                   ({"input": "x", "dimensions": 8}, "dimensions"), ({"input": list(range(65)) * 2}, "input"),
                                   ({"input": "x", "encoding_format": 5}, "encoding_format")):
                    req = urllib.request.Request(server.url + "/v1/embeddings", data=json.dumps(bad).encode())
                    with self.assertRaises(urllib.error.HTTPError) as cm:
                        urllib.request.urlopen(req, timeout=60)
                    self.assertEqual(cm.exception.code, 400)
                    self.assertEqual(json.loads(cm.exception.read())["error"]["param"], param)
            finally:
                server.stop()


if __name__ == "__main__":
    unittest.main()
