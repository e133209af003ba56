"""tools/bench/plot.py: the series it draws (one line per model and policy, sorted by context, in the
units of the axes) and the PNG it writes, from slake-bench records written here."""
import importlib.util
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("plot", os.path.join(HERE, "..", "..", "tools", "bench", "plot.py"))
plot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot)


def record(policy, budget, depth, ms, rss_mib, kv_mib, n_gen=32):
    return {"model_type": "tiny (synthetic)", "kv_policy": policy, "kv_budget": budget, "n_depth": depth,
            "n_gen": n_gen, "token_avg_ns": ms * 1e6, "peak_rss_bytes": rss_mib * 2**20, "kv_bytes": kv_mib * 2**20,
            "token_p50_ns": ms * 1e6, "token_p99_ns": ms * 1e6, "avg_ts": 1e3 / ms,
            "bytes_per_token": 100e6, "mem_bandwidth_gbps": 10.0}


RECORDS = [record("slake", 128, 4096, 2.5, 18, 0.5), record("full", 0, 4096, 3.8, 29, 16),
           record("full", 0, 1024, 2.4, 14, 4), record("slake", 128, 1024, 2.6, 12, 0.5),
           record("full", 0, 0, 9.0, 9, 0, n_gen=0)]  # a prompt test: not drawn


class Series(unittest.TestCase):
    def test_one_line_per_policy_sorted_by_context(self):
        s = plot.series(RECORDS)
        self.assertEqual(set(s), {("tiny (synthetic)", "full"), ("tiny (synthetic)", "slake C=128")})
        full = s[("tiny (synthetic)", "full")]
        self.assertEqual([p[0] for p in full], [1024, 4096])
        self.assertAlmostEqual(full[1][1], 3.8)   # ms per token
        self.assertAlmostEqual(full[1][2], 29 / 1024)  # GiB
        self.assertAlmostEqual(full[1][3], 16)    # KV MiB


class Png(unittest.TestCase):
    def test_writes_a_two_panel_png(self):
        import matplotlib.image
        with tempfile.TemporaryDirectory() as tmp:
            src, out = os.path.join(tmp, "b.jsonl"), os.path.join(tmp, "b.png")
            with open(src, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in RECORDS)
            sys.argv = ["plot.py", src, "-o", out]
            plot.main()
            with open(out, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            h, w = matplotlib.image.imread(out).shape[:2]
            self.assertEqual((w, h), (11 * 120, int(4.2 * 120)))

    def test_refuses_input_without_generation_tests(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "b.json")
            with open(src, "w") as f:
                json.dump([RECORDS[-1]], f)
            sys.argv = ["plot.py", src, "-o", os.path.join(tmp, "b.png")]
            with self.assertRaises(SystemExit) as e:
                plot.main()
            self.assertIn("no generation tests", str(e.exception))


if __name__ == "__main__":
    unittest.main()
