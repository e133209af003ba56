"""tools/quality/kv_quality.py: which records are current (a policy's records before the commit it
last changed at are not), the rows the matrix names, the table's cells, its bold minimum and the
comparison at equal bytes (against figures worked by hand), the doc's markers, and a run on
stories260K that writes one record per missing cell with the commit and runs nothing the second
time, and slake-perplexity --kv-sweep's records against separate runs'."""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "quality"))
import kv_quality as kq  # noqa: E402

SHARED = os.environ.get("SLAKE_SHARED_DIR", "")
BIN = os.environ.get("SLAKE_BIN_DIR", "")
MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
TEXT = os.path.join(SHARED, "text", "tinyshakespeare.txt")


def rec(policy, comp, budget, kl, mib, commit="new", top1=0.5):
    return dict(kv_policy=policy, kv_compensate=comp, kv_budget=budget, kl_mean=kl, top1_agreement=top1,
                kv_bytes_end=int(mib * 2**20), ppl=10.0, n_ctx=4096, n_prefill=2048, n_decode=2048, commit=commit)


class Rows(unittest.TestCase):
    def test_labels(self):
        self.assertEqual(kq.row_label("slake", "taylor"), "slake")
        self.assertEqual(kq.row_label("slake", "none"), "slake, no compensator")
        self.assertEqual(kq.row_label("cake", "none"), "cake")
        self.assertEqual(kq.row_label("cake", "centroids"), "cake + centroids")

    def test_matrix_is_every_policy_with_every_compensator(self):
        rows = kq.matrix_rows()
        self.assertEqual(len(rows), 1 + len(kq.POLICIES) * 3)
        # AhaKV's and SRE's rows as --kv-sweep spells them; SRE's own compensator is slake's Taylor state.
        self.assertEqual(kq.row_label("cake@ahakv", "none"), "cake@ahakv")
        self.assertEqual(kq.row_label("slake@sre:0.8", "taylor"), "slake@sre:0.8")
        self.assertEqual(len(set(kq.row_label(p, c) for p, c in rows)), len(rows))

    def test_parse_rows(self):
        self.assertEqual(kq.parse_rows("cake"), [("cake", "none")])
        self.assertEqual(kq.parse_rows("slake*"), [("slake", c) for c in kq.COMPENSATORS])
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            kq.parse_rows("cake + nothing")


class Current(unittest.TestCase):
    def setUp(self):
        self.saved = kq.descends
        kq.descends = lambda commit, since: commit == "new"  # "old" is before every POLICY_SINCE

    def tearDown(self):
        kq.descends = self.saved

    def test_stale_records_of_a_changed_policy_are_dropped(self):
        recs = [rec("slake-wide", "none", 128, 0.4, 2.86, "old"), rec("cake", "none", 128, 0.3, 2.86, "old")]
        cur = kq.current(recs)
        self.assertNotIn(("slake-wide", "none", 128), cur)  # changed since "old"
        self.assertIn(("cake", "none", 128), cur)           # cake has not changed

    def test_the_latest_current_record_wins(self):
        recs = [rec("slake-wide", "none", 128, 0.4, 2.86), rec("slake-wide", "none", 128, 0.35, 2.86),
                rec("slake-wide", "none", 128, 0.1, 2.86, "old")]
        self.assertEqual(kq.current(recs)[("slake-wide", "none", 128)]["kl_mean"], 0.35)


class Table(unittest.TestCase):
    def test_cells_bold_and_comparison(self):
        recs = [rec("streaming", "none", 128, 0.40, 2.86), rec("cake", "none", 128, 0.30, 2.86),
                rec("cake", "taylor", 128, 0.20, 4.31),  # lower, but with more bytes: neither bold nor compared at 128
                rec("slake-wide", "none", 128, 0.27, 2.85), rec("cake", "none", 256, 0.2, 5.71),
                rec("slake-wide", "none", 256, 0.22, 5.71), rec("streaming", "none", 256, 0.25, 5.71)]
        text = kq.context_section("4k", {kq.cell_key(r): r for r in recs})
        lines = text.splitlines()
        wide = next(l for l in lines if l.startswith("| slake-wide |"))
        self.assertEqual(wide, "| slake-wide | **0.2700** / 50.0% / 2.85 | 0.2200 / 50.0% / 5.71 |")
        self.assertIn("| cake + taylor | 0.2000 / 50.0% / 4.31 | . |", lines)
        self.assertIn("| cake | 0.3000 / 50.0% / 2.86 | **0.2000** / 50.0% / 5.71 |", lines)
        # 0.27 / 0.30 - 1 = -10.0% (cake's 2.86 MiB is within 1% of 2.85);
        self.assertIn("| 128 | cake C=128: 0.3000 | 0.2700 | -10.0% |", lines)
        # at 5.71 MiB cake + taylor at C=128 (4.31 MiB) competes and is the best: 0.22 / 0.20 - 1.
        self.assertIn("| 256 | cake + taylor C=128: 0.2000 | 0.2200 | +10.0% |", lines)
        # the compensator against eviction alone: cake + taylor 0.20 against cake 0.30 at C=128.
        self.assertIn("| cake | -33.3% / . | . / . |", lines)
        effect = lines[next(i for i, l in enumerate(lines) if l.startswith("Each compensator")):]
        self.assertFalse(any(l.startswith("| streaming |") for l in effect))  # no compensated streaming row

    def test_ahakv_rows_neither_bold_nor_compared(self):
        # AhaKV holds its ring beyond the bytes shown: a lower KL at the same cache bytes is not bold,
        # nor slake-wide's best other.
        recs = [rec("cake", "none", 128, 0.30, 2.86), rec("ahakv", "none", 128, 0.10, 2.86),
                rec("slake-wide", "none", 128, 0.27, 2.85)]
        lines = kq.context_section("4k", {kq.cell_key(r): r for r in recs}).splitlines()
        self.assertIn("| ahakv | 0.1000 / 50.0% / 2.86 |", lines)
        self.assertIn("| slake-wide | **0.2700** / 50.0% / 2.85 |", lines)
        self.assertIn("| 128 | cake C=128: 0.3000 | 0.2700 | -10.0% |", lines)
        self.assertTrue(any(l.startswith("AhaKV's rows also hold") for l in lines))

    def test_small_kl_in_scientific_notation(self):
        self.assertEqual(kq.num(8.0e-7), "8.0e-07")
        self.assertEqual(kq.num(0.04249), "0.0425")


class Write(unittest.TestCase):
    def write(self, doc_text, records):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "r"))
            with open(os.path.join(d, "r", "kl-4k.jsonl"), "w") as f:
                for r in records:
                    f.write(json.dumps(r) + "\n")
            doc = os.path.join(d, "doc.md")
            with open(doc, "w") as f:
                f.write(doc_text)
            saved = kq.descends
            kq.descends = lambda commit, since: True
            try:
                kq.write(type("A", (), dict(records=os.path.join(d, "r"), doc=doc, no_plot=True))())
            finally:
                kq.descends = saved
            with open(doc) as f:
                return f.read()

    def test_replaces_between_the_markers_only(self):
        out = self.write(f"# head\n{kq.BEGIN}\nold table\n{kq.END}\ntail\n", [rec("cake", "none", 128, 0.3, 2.86)])
        self.assertTrue(out.startswith("# head\n" + kq.BEGIN))
        self.assertTrue(out.endswith(kq.END + "\ntail\n"))
        self.assertNotIn("old table", out)
        self.assertIn("| cake | **0.3000** / 50.0% / 2.86 |", out)

    def test_refuses_a_doc_without_markers(self):
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            self.write("# no markers\n", [rec("cake", "none", 128, 0.3, 2.86)])


@unittest.skipUnless(os.path.exists(MODEL) and os.path.exists(TEXT) and os.path.exists(os.path.join(BIN, "slake-perplexity")),
                     "needs ../shared's stories260K and tinyshakespeare, and slake-perplexity")
class RunOnStories(unittest.TestCase):
    def test_runs_missing_cells_once(self):
        with tempfile.TemporaryDirectory() as d:
            cmd = [sys.executable, os.path.join(ROOT, "tools", "quality", "kv_quality.py"), "run", "-m", MODEL, "-f", TEXT,
                   "--bin", os.path.join(BIN, "slake-perplexity"), "--contexts", "tiny=256:128", "--rows", "full,cake,slake",
                   "--budgets", "32,64,128", "--window", "8", "--records", d, "--allow-dirty", "-t", "1"]
            first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            self.assertEqual(first.returncode, 0, first.stderr)
            recs = kq.load(os.path.join(d, "kl-tiny.jsonl"))
            # full once; cake and slake at 32 and 64 (128 >= the 128 prefilled tokens is left out).
            self.assertEqual(sorted(kq.cell_key(r) for r in recs),
                             sorted([("full", "none", 0), ("cake", "none", 32), ("cake", "none", 64),
                                     ("slake", "taylor", 32), ("slake", "taylor", 64)]))
            head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
            self.assertTrue(all(r["commit"] == head and r["n_ctx"] == 256 and r["n_prefill"] == 128 for r in recs))
            self.assertTrue(all(r["kl_mean"] > 0 for r in recs if r["kv_policy"] != "full"))
            second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            self.assertEqual(second.returncode, 0, second.stderr)
            self.assertEqual(len(kq.load(os.path.join(d, "kl-tiny.jsonl"))), len(recs), "nothing runs twice")
            self.assertEqual(second.stderr, "")

    def test_sweep_gives_each_setting_its_own_runs_record(self):
        """--kv-sweep decodes the settings together (decode_batch) against one reference; every
        figure of each setting's record must equal what its own process prints."""
        base = [os.path.join(BIN, "slake-perplexity"), "-m", MODEL, "-f", TEXT, "-c", "256", "--prefill", "128",
                "--chunks", "2", "-t", "2", "--kl-divergence", "-o", "json", "--kv-window", "8"]
        settings = ["cake/taylor/32", "slake-wide/none/64", "h2o/centroids/32", "full/none/0", "slake/auto/48"]
        out = subprocess.run(base + ["--kv-sweep", ",".join(settings)], capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        together = json.loads(out.stdout)
        self.assertEqual(len(together), len(settings))
        timing = ("seconds", "settings_run_together")
        for setting, got in zip(settings, together):
            policy, comp, budget = setting.split("/")
            alone = subprocess.run(base + ["--kv-policy", policy, "--kv-compensate", comp, "--kv-budget", budget],
                                   capture_output=True, text=True, timeout=300)
            self.assertEqual(alone.returncode, 0, alone.stderr)
            want = json.loads(alone.stdout)
            self.assertEqual({k: v for k, v in got.items() if k not in timing},
                             {k: v for k, v in want.items() if k not in timing}, setting)
            self.assertEqual(got["settings_run_together"], len(settings))
        self.assertGreater(together[0]["kl_mean"], 0)
        self.assertLess(together[3]["kl_mean"], 1e-4)  # the f16 full cache against the f32 reference

    def test_sweep_refuses_a_malformed_setting(self):
        for bad, msg in [("cake/taylor", "not POLICY/COMPENSATOR/BUDGET"), ("cake/taylor/x", "budget must be a number"),
                         ("cake/bogus/64", "unknown KV compensator 'bogus'"), ("nope/none/64", "unknown KV policy 'nope'"),
                         ("cake/none/64,", "'' is not POLICY/COMPENSATOR/BUDGET")]:
            out = subprocess.run([os.path.join(BIN, "slake-perplexity"), "-m", MODEL, "-f", TEXT, "--kv-sweep", bad],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 1, bad)
            self.assertIn(msg, out.stderr, bad)


if __name__ == "__main__":
    unittest.main()
