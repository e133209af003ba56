"""tools/ruler/ruler.py: the generated tasks hold what their questions ask for (every needle, the
variable chain in order, the common words more often than the rest), the same seed gives the same
prompts, RULER's string-match score, the table's ranking rule, and a run through slake-cli --batch
on stories260K whose prompts fit the context."""
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import unittest
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "ruler"))
import ruler  # noqa: E402

SHARED = os.environ.get("SLAKE_SHARED_DIR", "")
BIN = os.environ.get("SLAKE_BIN_DIR", "")
HAVE_TEXT = os.path.exists(os.path.join(SHARED, "text", "wikitext2-test.txt"))


def args(**kw):
    a = dict(ctx=2048, samples=3, seed=1, chars_scale=1.0)
    a.update(kw)
    return SimpleNamespace(**a)


@unittest.skipUnless(HAVE_TEXT, "../shared/text is missing")
class Generation(unittest.TestCase):
    def setUp(self):
        self.reqs = {r["id"]: r for r in ruler.requests(args())}

    def test_every_task_and_sample(self):
        self.assertEqual(len(self.reqs), len(ruler.TASKS) * 3)

    def test_needles_hold_the_answers(self):
        for i in range(3):
            for task in ("niah_single_number", "niah_single_uuid", "niah_multikey", "niah_multivalue"):
                r = self.reqs[f"{task}/{i}"]
                key = re.search(r"for ([a-z]+-[a-z]+) mentioned", r["prompt"]).group(1)
                needles = re.findall(rf"One of the special magic \w+ for {key} is: (\S+)\.", r["prompt"])
                self.assertEqual(sorted(needles), sorted(r["answers"]), task)
                self.assertEqual(len(r["answers"]), 4 if task == "niah_multivalue" else 1)
            keys = set(re.findall(r"special magic numbers for ([a-z]+-[a-z]+) is:", self.reqs[f"niah_multikey/{i}"]["prompt"]))
            self.assertEqual(len(keys), 4, "three distractor keys and the one asked for")

    def test_variable_chain_in_order(self):
        for i in range(3):
            r = self.reqs[f"variable_tracking/{i}"]
            names = r["answers"]
            value = re.search(rf"VAR {names[0]} = (\d+)\.", r["prompt"]).group(1)
            at = [r["prompt"].index(f"VAR {names[0]} = {value}.")]
            for a, b in zip(names, names[1:]):
                at.append(r["prompt"].index(f"VAR {b} = VAR {a}."))
            self.assertEqual(at, sorted(at))
            self.assertIn(f"assigned the value {value}", r["prompt"])

    def test_common_words_are_the_most_common(self):
        for i in range(3):
            r = self.reqs[f"common_words/{i}"]
            listing = r["prompt"].split("\n")[1]
            words = re.findall(r"\d+\. (\w+)", listing)
            counts = {w: words.count(w) for w in set(words)}
            least_common = min(counts[w] for w in r["answers"])
            most_other = max((c for w, c in counts.items() if w not in r["answers"]), default=0)
            self.assertGreater(least_common, most_other)

    def test_seeded(self):
        again = {r["id"]: r for r in ruler.requests(args())}
        self.assertEqual(again, self.reqs)
        other = {r["id"]: r for r in ruler.requests(args(seed=2))}
        self.assertNotEqual(other["niah_single_number/0"]["answers"], self.reqs["niah_single_number/0"]["answers"])

    def test_tasks_keep_their_prompts(self):
        # A run of some tasks (finishing an interrupted one) asks what a full run asks of them.
        some = {r["id"]: r for r in ruler.requests(args(tasks="variable_tracking,niah_multikey"))}
        self.assertEqual(sorted(some), sorted(i for i in self.reqs if i.split("/")[0] in ("variable_tracking", "niah_multikey")))
        for i, r in some.items():
            self.assertEqual(r, self.reqs[i])
        with self.assertRaises(SystemExit):
            ruler.requests(args(tasks="niah_single_number,haystack"))


class Scoring(unittest.TestCase):
    def test_string_match(self):
        self.assertEqual(ruler.score(" 1234567.", ["1234567"]), 1.0)
        self.assertEqual(ruler.score("1234568", ["1234567"]), 0.0)
        self.assertEqual(ruler.score("Apple and RIVER", ["apple", "river", "stone", "cloud"]), 0.5)

    def test_table_ranks_only_tasks_the_full_cache_solves(self):
        recs = [{"policy": "full", "budget": 0, "task": "niah_single_number", "score": 1.0},
                {"policy": "full", "budget": 0, "task": "common_words", "score": 0.2},
                {"policy": "cake", "budget": 64, "task": "niah_single_number", "score": 0.5},
                {"policy": "cake", "budget": 64, "task": "common_words", "score": 1.0}]
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write("".join(json.dumps(r) + "\n" for r in recs))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ruler.table([f.name])
        os.unlink(f.name)
        rows = {line.split("|")[1].strip(): line for line in out.getvalue().splitlines() if line.startswith("| full") or line.startswith("| cake")}
        self.assertTrue(rows["cake"].rstrip().endswith("| 50.0 |"), rows["cake"])  # common_words left out
        self.assertIn("20*", rows["full"])


class Labels(unittest.TestCase):
    def test_the_full_cache_is_named_without_the_recall_stores_flags(self):
        # --kv-sweep gives the recall store to the evicting settings only, so the full row keeps its name
        self.assertEqual(ruler.label("full", "auto", "--kv-recall-pages 64 --kv-recall-score quest --kv-recall-every 4"), "full")
        self.assertEqual(ruler.label("full", "auto", "-ctk q8_0 --kv-store-type q4_0 -ctv q8_0"), "full -ctk q8_0 -ctv q8_0")
        self.assertEqual(ruler.label("snapkv", "auto", "--kv-recall-pages 64"), "snapkv --kv-recall-pages 64")
        self.assertEqual(ruler.label("cake", "none", "--kv-observe 32"), "cake --kv-compensate none --kv-observe 32")


@unittest.skipUnless(HAVE_TEXT and os.path.exists(os.path.join(SHARED, "models", "stories260K.gguf")), "../shared is missing")
class EndToEnd(unittest.TestCase):
    def test_run_on_stories(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.jsonl")
            sys.argv = ["ruler.py", "run", "-m", os.path.join(SHARED, "models", "stories260K.gguf"), "-c", "1024", "-n", "1",
                        "--policies", "full,streaming,cake", "--budgets", "64", "--compensate", "centroids", "--bin-dir", BIN,
                        "-t", "1", "-o", out]
            with contextlib.redirect_stderr(io.StringIO()):
                ruler.main()
            recs = [json.loads(line) for line in open(out)]
        # one process for the three settings (--kv-sweep); the rows named as the table names them
        self.assertEqual(sorted({(r["policy"], r["budget"]) for r in recs}),
                         [("cake --kv-compensate centroids", 64), ("full", 0), ("streaming --kv-compensate centroids", 64)])
        self.assertEqual(len(recs), 3 * len(ruler.TASKS))
        for r in recs:
            self.assertLessEqual(r["n_prompt_tokens"] + r["max_new_tokens"], 1024)
            self.assertEqual(r["score"], ruler.score(r["reply"], r["answers"]))


    def test_refuses_kv_settings_in_extra(self):
        sys.argv = ["ruler.py", "run", "-m", "x.gguf", "--extra", "--kv-compensate none", "-o", "/dev/null"]
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit) as e:
            ruler.main()
        self.assertIn("--compensate", str(e.exception.code))


if __name__ == "__main__":
    unittest.main()
