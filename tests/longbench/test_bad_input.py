"""tools/longbench on bad input: malformed records, missing data files, unknown datasets, missing or
broken config files, requests the engine refuses, an engine that cannot start, an output directory
from another configuration. Each gets a message naming the record or file; the rest of the run goes
on where that is safe."""
import json
import os
import shutil
import tempfile
import unittest

import lbtest


def good(i, **extra):
    rec = {"_id": f"ok-{i}", "input": "Who?", "context": "Lily went to the park.", "answers": ["Lily"],
           "all_classes": None, "length": 100, "language": "en"}
    rec.update(extra)
    return rec


@lbtest.require_shared()
class BadInput(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="slake-longbench-bad-")
        self.data = os.path.join(self.tmp, "data")
        os.makedirs(self.data)
        self.out = os.path.join(self.tmp, "out")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_lb(self, *extra, config=lbtest.CONFIG, datasets="triviaqa", cmd="run"):
        return lbtest.longbench(cmd, "--data", self.data, "--config", config, "-m", lbtest.MODEL, "--out", self.out,
                                "--datasets", datasets, "--policies", "full", "--max-length", "3500", "-c", "512",
                                "--slake-cli", lbtest.SLAKE_CLI, *extra)

    def pred_ids(self, dataset, run="full"):
        with open(os.path.join(self.out, run, "pred", f"{dataset}.jsonl"), encoding="utf-8") as f:
            return [json.loads(line)["_id"] for line in f]

    def test_malformed_records_are_named_and_skipped(self):
        path = os.path.join(self.data, "triviaqa.jsonl")
        no_answers = good(3)
        del no_answers["answers"]
        no_context = good(5)
        del no_context["context"]
        no_id = good(7)
        del no_id["_id"]
        lbtest.write_jsonl(path, [
            good(1),
            "{not json",
            no_answers,
            good(4, answers="Lily"),
            no_context,
            good(1),  # the same _id again
            no_id,
            good(8, length="long"),
            "[1, 2]",
            '{"_id": "ok-9", "input": "Who?", "context": "half a pair \\ud800", "answers": ["Lily"]}',
            good(10),
        ])
        rc, stdout, stderr = self.run_lb()
        self.assertEqual(rc, 3, stderr)
        for expected in [f"{path}:2: not valid JSON",
                         f"{path}:3 (_id ok-3): \"answers\" must be a non-empty list of strings; record skipped",
                         f"{path}:4 (_id ok-4): \"answers\" must be a non-empty list of strings",
                         f"{path}:5 (_id ok-5): missing field \"context\", which the prompt template needs",
                         f"{path}:6 (_id ok-1): the same _id as an earlier record",
                         f"{path}:7: no \"_id\"",
                         f"{path}:8 (_id ok-8): \"length\" must be a number",
                         f"{path}:9: not a JSON object",
                         f"{path}:10 (_id ok-9): field \"context\" is not valid Unicode"]:
            self.assertIn(expected, stderr)
        self.assertEqual(self.pred_ids("triviaqa"), ["ok-1", "ok-10"])
        self.assertIn("| full | — |", stdout)  # scored and tabulated all the same

    def test_classification_records_need_their_classes(self):
        path = os.path.join(self.data, "trec.jsonl")
        lbtest.write_jsonl(path, [good(1), good(2, all_classes=["A", "B"], answers=["A"])])
        rc, _, stderr = self.run_lb(datasets="trec")
        self.assertEqual(rc, 3)
        self.assertIn(f"{path}:1 (_id ok-1): \"all_classes\" must be a non-empty list of strings", stderr)
        self.assertEqual(self.pred_ids("trec"), ["ok-2"])

    def test_missing_data_file_and_unknown_dataset(self):
        lbtest.write_jsonl(os.path.join(self.data, "triviaqa.jsonl"), [good(1)])
        rc, _, stderr = self.run_lb(datasets="hotpotqa,nosuch,triviaqa")
        self.assertEqual(rc, 3)
        self.assertIn(f"{os.path.join(self.data, 'hotpotqa.jsonl')}: no such file; dataset hotpotqa skipped", stderr)
        self.assertIn("dataset2prompt.json: no prompt template for 'nosuch'; dataset nosuch skipped", stderr)
        self.assertEqual(self.pred_ids("triviaqa"), ["ok-1"])

    def test_missing_or_broken_config_stops_the_command(self):
        lbtest.write_jsonl(os.path.join(self.data, "triviaqa.jsonl"), [good(1)])
        config = os.path.join(self.tmp, "config")
        os.makedirs(config)
        shutil.copy(os.path.join(lbtest.CONFIG, "dataset2prompt.json"), config)
        rc, _, stderr = self.run_lb(config=config)
        self.assertEqual(rc, 1)
        self.assertIn(f"error: {os.path.join(config, 'dataset2maxlen.json')}: no such file", stderr)
        with open(os.path.join(config, "dataset2maxlen.json"), "w") as f:
            f.write('{"triviaqa": 32,')
        rc, _, stderr = self.run_lb(config=config)
        self.assertEqual(rc, 1)
        self.assertIn(f"error: {os.path.join(config, 'dataset2maxlen.json')}: cannot read it", stderr)
        with open(os.path.join(config, "dataset2maxlen.json"), "w") as f:
            f.write('{"triviaqa": "long"}')
        rc, _, stderr = self.run_lb(config=config)
        self.assertEqual(rc, 3)
        self.assertIn("the max length of 'triviaqa' must be a positive integer", stderr)

    def test_a_request_the_engine_refuses_is_named_and_the_rest_runs(self):
        long = good(2, context=lbtest.STORY * 12)  # about 750 tokens, more than -c 512 holds
        lbtest.write_jsonl(os.path.join(self.data, "triviaqa.jsonl"), [good(1), long, good(3)])
        rc, _, stderr = self.run_lb()
        self.assertEqual(rc, 3)
        self.assertRegex(stderr, r"triviaqa _id ok-2: slake-cli: request line 2: the prompt is \d+ tokens, more than "
                                 r"the context holds \(-c 512\)")
        self.assertEqual(self.pred_ids("triviaqa"), ["ok-1", "ok-3"])
        # A rerun tries the refused record again, and only that one.
        rc, _, stderr = self.run_lb()
        self.assertEqual(rc, 3)
        self.assertIn("triviaqa _id ok-2: slake-cli: request line 1:", stderr)

    def test_the_same_error_again_and_again_ends_the_run(self):
        # qasper goes through the chat template, and stories260K has none (no --chat-template).
        lbtest.write_jsonl(os.path.join(self.data, "qasper.jsonl"), [good(i) for i in range(8)])
        lbtest.write_jsonl(os.path.join(self.data, "triviaqa.jsonl"), [good(1)])
        rc, _, stderr = self.run_lb("--policies", "full,slake", "--budgets", "64", datasets="qasper,triviaqa")
        self.assertEqual(rc, 3)
        self.assertIn("the model has no chat template; choose one with --chat-template", stderr)
        self.assertIn("qasper: 5 requests in a row failed", stderr)
        self.assertEqual(stderr.count("giving up on this run"), 2)  # each run stops, the next one still starts
        self.assertFalse(os.path.exists(os.path.join(self.out, "full", "pred", "triviaqa.jsonl")))

    def test_engine_that_cannot_start(self):
        lbtest.write_jsonl(os.path.join(self.data, "triviaqa.jsonl"), [good(1)])
        rc, _, stderr = lbtest.longbench("predict", "--data", self.data, "--config", lbtest.CONFIG, "-m",
                                         os.path.join(self.tmp, "nothing.gguf"), "--out", self.out, "--datasets",
                                         "triviaqa", "--policies", "full", "--max-length", "100",
                                         "--slake-cli", lbtest.SLAKE_CLI)
        self.assertEqual(rc, 3)
        self.assertIn("run full stopped: slake-cli exited (status 1)", stderr)
        self.assertIn("nothing.gguf", stderr)  # the engine's own message, from engine.log
        self.out = os.path.join(self.tmp, "out2")
        rc, _, stderr = self.run_lb("--slake-cli", os.path.join(self.tmp, "no-cli"))
        self.assertEqual(rc, 3)
        self.assertIn("no-cli: no such executable", stderr)

    def test_output_of_another_configuration_is_not_mixed_in(self):
        lbtest.write_jsonl(os.path.join(self.data, "triviaqa.jsonl"), [good(1)])
        self.assertEqual(self.run_lb()[0], 0)
        rc, _, stderr = self.run_lb("--max-length", "100")
        self.assertEqual(rc, 3)
        self.assertIn("these predictions were made with max_length = 3500, this run has 100", stderr)

    def test_bad_arguments(self):
        for args, message in [(["--shard", "2/2"], "--shard takes i/n"),
                              (["--budgets", "0"], "budgets must be positive"),
                              (["--limit", "-1"], "--limit must be >= 0")]:
            rc, _, stderr = self.run_lb(*args, cmd="predict")
            self.assertEqual(rc, 2, args)
            self.assertIn(message, stderr)
        rc, _, stderr = lbtest.longbench("predict", "--data", self.data, "--config", lbtest.CONFIG, "-m",
                                         "/models/mystery.gguf", "--out", self.out)
        self.assertEqual(rc, 2)
        self.assertIn("cannot tell the model family from '/models/mystery.gguf'", stderr)


if __name__ == "__main__":
    unittest.main()
