"""tools/longbench end to end through the real engine on stories260K, on a LongBench-format sample
built here: every stage ran (one slake-cli process per policy and budget, predictions, result.json,
table), the files hold what they should, and a resumed run redoes only what is missing. The scores
of such a model mean nothing; they are only checked for shape."""
import json
import os
import re
import shutil
import tempfile
import unittest

import lbtest
from lbeval import data, protocol
from spm_reference import SpmReference

DATASETS = ["qasper", "trec", "samsum", "lcc"]  # chat; classes and first line; stop at newline; code
N = 3
MAX_LENGTH = 600  # between the short prompts (at most 547 tokens) and the long ones (798 or more)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def loaded_count(run_dir):
    with open(os.path.join(run_dir, "engine.log"), encoding="utf-8") as f:
        return sum(1 for line in f if line.startswith("loaded "))


@lbtest.require_shared()
class EndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="slake-longbench-")
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)
        cls.records = {ds: lbtest.sample_records(ds, N) for ds in DATASETS}
        for ds, recs in cls.records.items():
            lbtest.write_jsonl(os.path.join(cls.data, f"{ds}.jsonl"), recs)
        cls.out = os.path.join(cls.tmp, "out")
        cls.args = ["run", "--data", cls.data, "--config", lbtest.CONFIG, "-m", lbtest.MODEL, "--out", cls.out,
                    "--datasets", ",".join(DATASETS), "--policies", "full,slake", "--budgets", "32,16",
                    "--max-length", str(MAX_LENGTH), "-c", "1024", "-t", "1", "--slake-cli", lbtest.SLAKE_CLI,
                    "--engine-args", "--chat-template llama2 --kv-window 8"]
        cls.rc, cls.stdout, cls.stderr = lbtest.longbench(*cls.args)
        cls.tok = SpmReference(lbtest.TOKENIZER_BIN)
        cls.prompts, cls.maxlens = data.load_config(lbtest.CONFIG)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_dirs(self):
        return {name: os.path.join(self.out, name) for name in ("full", "slake-16", "slake-32")}

    def test_run_succeeds_without_warnings(self):
        self.assertEqual(self.rc, 0, self.stderr)
        self.assertNotIn("warning", self.stderr)
        self.assertEqual(sorted(os.listdir(self.out)),
                         sorted(list(self.run_dirs()) + ["table.md", "results.json"]))

    def test_one_engine_process_per_run(self):
        for name, d in self.run_dirs().items():
            with self.subTest(run=name):
                self.assertEqual(loaded_count(d), 1)
                with open(os.path.join(d, "engine.log"), encoding="utf-8") as f:
                    cmd = f.readline()
                policy = name.split("-")[0]
                self.assertIn(f"--kv-policy {policy}", cmd)
                self.assertEqual("--kv-budget" in cmd, policy != "full")
                with open(os.path.join(d, "run.json"), encoding="utf-8") as f:
                    info = json.load(f)
                self.assertEqual((info["policy"], info["max_length"]), (policy, MAX_LENGTH))

    def test_prediction_files(self):
        for name, d in self.run_dirs().items():
            for ds in DATASETS:
                with self.subTest(run=name, dataset=ds):
                    preds = read_jsonl(os.path.join(d, "pred", f"{ds}.jsonl"))
                    self.assertEqual([p["_id"] for p in preds], [r["_id"] for r in self.records[ds]])
                    for p, rec in zip(preds, self.records[ds]):
                        self.assertIsInstance(p["pred"], str)
                        self.assertEqual((p["answers"], p["all_classes"], p["length"]),
                                         (rec["answers"], rec["all_classes"], rec["length"]))
                        # Token counts from the independent tokenizer: the prompt as filled, and
                        # whether it was cut.
                        n = len(self.tok.encode(self.prompts[ds].format(**rec)))
                        self.assertEqual(p["n_prompt_tokens_in"], n)
                        self.assertEqual(p["truncated"], n > MAX_LENGTH)
                        self.assertLessEqual(p["n_gen"], self.maxlens[ds])
                        if ds == "samsum":
                            self.assertTrue(p["stop_reason"] != "stop" or p["pred"].endswith("\n"))
                    self.assertTrue(any(p["truncated"] for p in preds) and not all(p["truncated"] for p in preds))

    def test_results_and_table(self):
        with open(os.path.join(self.out, "results.json"), encoding="utf-8") as f:
            results = json.load(f)
        rows = {r["run"]: r for r in results["runs"]}
        self.assertEqual(set(rows), set(self.run_dirs()))
        with open(os.path.join(self.out, "table.md"), encoding="utf-8") as f:
            table = f.read()
        lines = [line for line in table.splitlines() if line.startswith("| ")]
        names = [protocol.SHORT_NAME[d] for d in DATASETS]  # DATASETS is in the papers' order
        self.assertEqual(lines[0], "| Method | C | " + " | ".join(names) + " | Avg. |")
        # Full cache first, then the budgets in increasing order, policies as given.
        self.assertEqual([line.split(" | ")[0:2] for line in lines[1:]],
                         [["| full", "—"], ["| slake", "16"], ["| slake", "32"]])
        for line in lines[1:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            run = cells[0] if cells[0] == "full" else f"{cells[0]}-{cells[1]}"
            with open(os.path.join(self.out, run, "result.json"), encoding="utf-8") as f:
                result = json.load(f)
            self.assertEqual(result, rows[run]["scores"])
            self.assertEqual(sorted(result), sorted(DATASETS))
            for ds, v in result.items():
                self.assertTrue(0 <= v <= 100 and round(v, 2) == v, (run, ds, v))
            values = [result[d] for d in DATASETS]
            self.assertEqual(cells[2:-1], [f"{v:.2f}" for v in values])
            self.assertEqual(cells[-1], f"{round(sum(values) / len(values), 2):.2f}")
        self.assertIn(table, self.stdout)

    def test_resumed_run_redoes_only_what_is_missing(self):
        out = os.path.join(self.tmp, "resume")
        shutil.copytree(self.out, out)
        full = os.path.join(out, "full", "pred")
        with open(os.path.join(full, "qasper.jsonl"), "rb") as f:
            qasper = f.read().splitlines(keepends=True)
        with open(os.path.join(full, "qasper.jsonl"), "wb") as f:  # 2 records kept, one half written
            f.write(b"".join(qasper[:2]) + qasper[2][:25])
        os.remove(os.path.join(full, "trec.jsonl"))
        untouched = {}
        for root, _, files in os.walk(out):
            for name in files:
                if name.endswith(".jsonl") and not (root == full and name == "qasper.jsonl"):
                    with open(os.path.join(root, name), "rb") as f:
                        untouched[os.path.join(root, name)] = f.read()
        args = list(self.args)
        args[args.index("--out") + 1] = out
        rc, stdout, stderr = lbtest.longbench(*args)
        self.assertEqual(rc, 0, stderr)
        self.assertIn("unfinished", stderr)
        with open(os.path.join(full, "qasper.jsonl"), "rb") as f:
            redone = f.read().splitlines(keepends=True)
        self.assertEqual(redone[:2], qasper[:2])  # byte for byte: not predicted again
        self.assertEqual(len(redone), N)
        old = [json.loads(x) for x in qasper]
        new = [json.loads(x) for x in redone]
        self.assertEqual([p["_id"] for p in new], [p["_id"] for p in old])
        self.assertEqual([p["pred"] for p in new], [p["pred"] for p in old])  # greedy: the same text
        self.assertEqual(len(read_jsonl(os.path.join(full, "trec.jsonl"))), N)
        for path, content in untouched.items():
            with open(path, "rb") as f:
                self.assertEqual(f.read(), content, path)
        self.assertEqual(loaded_count(os.path.join(out, "full")), 2)  # the rerun started one engine
        self.assertEqual(loaded_count(os.path.join(out, "slake-16")), 1)  # nothing to do: none started
        with open(os.path.join(out, "table.md"), encoding="utf-8") as f, \
                open(os.path.join(self.out, "table.md"), encoding="utf-8") as g:
            self.assertEqual(f.read(), g.read())

    def test_limit_and_shards(self):
        out = os.path.join(self.tmp, "shards")
        common = ["--data", self.data, "--config", lbtest.CONFIG, "-m", lbtest.MODEL, "--out", out,
                  "--datasets", "trec,lcc", "--policies", "slake", "--budgets", "16", "--max-length", str(MAX_LENGTH),
                  "-c", "1024", "--slake-cli", lbtest.SLAKE_CLI, "--engine-args", "--chat-template llama2 --kv-window 8",
                  "--limit", "2"]
        for shard in ("0/2", "1/2"):
            rc, _, stderr = lbtest.longbench("predict", *common, "--shard", shard)
            self.assertEqual(rc, 0, stderr)
        pred = os.path.join(out, "slake-16", "pred")
        self.assertEqual(sorted(os.listdir(pred)), ["lcc.shard0of2.jsonl", "lcc.shard1of2.jsonl",
                                                    "trec.shard0of2.jsonl", "trec.shard1of2.jsonl"])
        ids = [r["_id"] for r in self.records["trec"]]
        self.assertEqual([p["_id"] for p in read_jsonl(os.path.join(pred, "trec.shard0of2.jsonl"))], [ids[0]])
        self.assertEqual([p["_id"] for p in read_jsonl(os.path.join(pred, "trec.shard1of2.jsonl"))], [ids[1]])
        whole = {p["_id"]: p["pred"] for p in read_jsonl(os.path.join(self.out, "slake-16", "pred", "trec.jsonl"))}
        for name in ("trec.shard0of2.jsonl", "trec.shard1of2.jsonl"):
            for p in read_jsonl(os.path.join(pred, name)):
                self.assertEqual(p["pred"], whole[p["_id"]])
        rc, stdout, stderr = lbtest.longbench("score", "--out", out, "--data", self.data, "--datasets", "trec,lcc",
                                              "--limit", "2")
        self.assertEqual(rc, 0, stderr)
        self.assertNotIn("warning", stderr)
        self.assertRegex(stdout, r"\| slake \| 16 \| \d+\.\d\d \| \d+\.\d\d \| \d+\.\d\d \|")
        # Without --limit all 3 records are expected: the missing one is named.
        rc, _, stderr = lbtest.longbench("score", "--out", out, "--data", self.data, "--datasets", "trec,lcc")
        self.assertEqual(rc, 3)
        self.assertIn(f"slake-16 trec: 1 of 3 records have no prediction (first: _id {ids[2]})", stderr)

    def test_selection(self):
        # The first 7 of 0..9, then every 3rd from the 2nd: [1, 4]; shards cover the selection once.
        self.assertEqual(data.select(list(range(10)), 7, (1, 3)), [1, 4])
        self.assertEqual(sorted(sum((data.select(list(range(10)), 7, (i, 3)) for i in range(3)), [])), list(range(7)))
        self.assertEqual(data.select(list(range(5)), 0, (0, 1)), list(range(5)))

    def test_longbench_e_buckets(self):
        data_e = os.path.join(self.tmp, "data_e")
        os.makedirs(data_e)
        recs = lbtest.sample_records("trec", 4)
        for rec, length in zip(recs, (1000, 4000, 7999, 12000)):
            rec["length"] = length
        lbtest.write_jsonl(os.path.join(data_e, "trec_e.jsonl"), recs)
        out = os.path.join(self.tmp, "e")
        rc, stdout, stderr = lbtest.longbench("run", "--e", "--data", data_e, "--config", lbtest.CONFIG, "-m",
                                              lbtest.MODEL, "--out", out, "--datasets", "trec", "--policies", "full",
                                              "--max-length", "64", "-c", "1024", "--slake-cli", lbtest.SLAKE_CLI)
        self.assertEqual(rc, 0, stderr)
        self.assertEqual(len(read_jsonl(os.path.join(out, "full", "pred_e", "trec.jsonl"))), 4)
        with open(os.path.join(out, "full", "result_e.json"), encoding="utf-8") as f:
            result = json.load(f)
        self.assertEqual(list(result), ["trec"])
        self.assertEqual(list(result["trec"]), ["0-4k", "4-8k", "8k+"])
        with open(os.path.join(out, "table_e.md"), encoding="utf-8") as f:
            table = f.read()
        self.assertEqual(len(re.findall(r"^\| full \| — \|", table, re.M)), 3)


if __name__ == "__main__":
    unittest.main()
