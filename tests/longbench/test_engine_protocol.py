"""slake-cli --batch against the official protocol, with token counts from an independent
tokenizer (spm_reference.py, written from llama2.c) on stories260K: middle truncation, the prompt
templates, the chat template and the datasets that skip it, stop and min_new_tokens, greedy text
equal to plain slake-cli, a fresh context for every request."""
import json
import subprocess
import unittest

import lbtest
from lbeval import data, protocol
from spm_reference import BOS, SpmReference


@lbtest.require_shared()
class EngineProtocol(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tok = SpmReference(lbtest.TOKENIZER_BIN)

    def expected_truncation(self, prompt, max_length):
        """The official rule: [BOS] + tokens; beyond max_length, decode the first and the last
        max_length // 2 without special tokens and join the two texts."""
        ids = self.tok.encode(prompt)
        if len(ids) <= max_length:
            return prompt, ids, False
        half = max_length // 2
        text = self.tok.decode(ids[:half]) + self.tok.decode(ids[-half:])
        return text, ids, True

    def test_reference_tokenizer_agrees_with_slake_tokenize(self):
        text = lbtest.STORY + "Question: who?\nAnswer:"
        out = subprocess.run([lbtest.BIN + "/slake-tokenize", "-m", lbtest.MODEL, "-p", text],
                             capture_output=True, text=True, check=True).stdout
        self.assertEqual(json.loads(out), self.tok.encode(text))

    def test_middle_truncation(self):
        prompt = lbtest.STORY * 3 + "Now answer: who went to the park?"
        n = len(self.tok.encode(prompt))
        cases = [n + 5, n, n - 1, 41, 40, 2]  # no cut, exactly full, one over, odd, even, smallest
        resp = lbtest.batch([{"id": i, "prompt": prompt, "max_new_tokens": 0, "truncate_tokens": m,
                              "echo_prompt": True} for i, m in enumerate(cases)])
        for r, m in zip(resp, cases):
            with self.subTest(max_length=m):
                text, ids, cut = self.expected_truncation(prompt, m)
                self.assertEqual(r["truncated"], cut)
                self.assertEqual(r["n_prompt_tokens_in"], len(ids))
                self.assertEqual(r["prompt_text"], text)
                self.assertEqual(r["n_prompt_tokens"], len(self.tok.encode(text)))
                if cut:  # the two halves' texts are the start and the end of the prompt
                    half = m // 2
                    self.assertTrue(prompt.startswith(self.tok.decode(ids[:half])))
                    self.assertTrue(prompt.endswith(self.tok.decode(ids[-half:])))
                    self.assertLessEqual(r["n_prompt_tokens"], m + 2)  # a join may re-tokenize differently

    def test_templates_and_chat_exclusion(self):
        prompts, maxlens = data.load_config(lbtest.CONFIG)
        rec = lbtest.sample_records("qasper", 1, long_every=1)[0]
        max_length = 60
        reqs, expected = [], []
        for ds in ("qasper", "hotpotqa", "gov_report", "passage_count", "trec", "triviaqa", "samsum", "lcc",
                   "repobench-p"):
            # The template filled by hand: {context} and {input} replaced (no other field in them).
            filled = prompts[ds].replace("{context}", rec["context"]).replace("{input}", rec["input"])
            req = protocol.build_request(ds, rec, prompts[ds], maxlens[ds], max_length)
            self.assertEqual(req["prompt"], filled)
            self.assertEqual(req["max_new_tokens"], maxlens[ds])
            req.update(id=ds, max_new_tokens=0, echo_prompt=True)
            reqs.append(req)
            text, ids, cut = self.expected_truncation(filled, max_length)
            self.assertTrue(cut)
            if ds in ("trec", "triviaqa", "samsum", "lcc", "repobench-p"):  # no chat template
                expected.append((ds, text, len(self.tok.encode(text))))
            else:  # the official Llama 2 template: <s>[INST] {message.strip()} [/INST]
                user = "[INST] " + text.strip() + " [/INST]"
                expected.append((ds, "<s>" + user, len(self.tok.encode(user))))
        resp = lbtest.batch(reqs, "--chat-template", "llama2")
        for r, (ds, text, n) in zip(resp, expected):
            with self.subTest(dataset=ds):
                self.assertNotIn("error", r)
                self.assertEqual(r["prompt_text"], text)
                self.assertEqual(r["n_prompt_tokens"], n)
        # The exclusion list is the official one, and nothing else skips the template.
        skipped = {ds for ds in prompts if not protocol.build_request(ds, rec, prompts[ds], 1, 10**6)["chat"]}
        self.assertEqual(skipped, {"trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p"})

    def test_base_model_never_uses_a_chat_template(self):
        prompts, maxlens = data.load_config(lbtest.CONFIG)
        rec = lbtest.sample_records("qasper", 1)[0]
        self.assertFalse(protocol.build_request("qasper", rec, prompts["qasper"], 8, 100, chat_model=False)["chat"])

    def test_stop_at_newline_and_min_new_tokens(self):
        # A prompt whose greedy continuation starts with a newline (found by generating from it).
        prompt = ("Lily and Tom were playing in the park. They liked to play with their toys and run around the "
                  "park. They saw a big box with a big box. They wanted to play with the box.")
        free, stop0, stop1 = lbtest.batch([
            {"id": 0, "prompt": prompt, "max_new_tokens": 40},
            {"id": 1, "prompt": prompt, "max_new_tokens": 40, "stop": ["\n"]},
            {"id": 2, "prompt": prompt, "max_new_tokens": 40, "stop": ["\n"], "min_new_tokens": 1}])
        self.assertTrue(free["text"].startswith("\n"), free["text"])
        self.assertGreater(free["text"].count("\n"), 1)
        # Stops at the first newline token, which is kept.
        self.assertEqual((stop0["text"], stop0["n_gen"], stop0["stop_reason"]), ("\n", 1, "stop"))
        # With one token required the newline cannot come first; it then stops at the next newline.
        self.assertEqual(stop1["stop_reason"], "stop")
        self.assertTrue(stop1["text"].endswith("\n"))
        self.assertEqual(stop1["text"].count("\n"), 1)
        self.assertFalse(stop1["text"].startswith("\n"))

    def test_greedy_text_as_plain_slake_cli_and_a_fresh_context_each_time(self):
        prompt = "Once upon a time"
        cli = subprocess.run([lbtest.SLAKE_CLI, "-m", lbtest.MODEL, "-c", "1024", "-t", "1", "-p", prompt, "-n", "30",
                              "--temp", "0", "--no-display-prompt"], capture_output=True, text=True, check=True).stdout
        a, other, b = lbtest.batch([{"id": "a", "prompt": prompt, "max_new_tokens": 30},
                                    {"id": "x", "prompt": lbtest.STORY, "max_new_tokens": 30},
                                    {"id": "b", "prompt": prompt, "max_new_tokens": 30}])
        self.assertEqual((a["n_gen"], a["stop_reason"]), (30, "length"))
        # The streamed text keeps the first token's space; the decoded reply drops it, as Hugging Face.
        self.assertIn(cli.rstrip("\n"), (a["text"], " " + a["text"]))
        self.assertEqual(a["text"], b["text"])
        self.assertNotEqual(other["text"], a["text"])
        self.assertEqual(a["n_prompt_tokens"], len(self.tok.encode(prompt)))


if __name__ == "__main__":
    unittest.main()
