#!/usr/bin/env bash
# slake-bench end to end on a synthetic model: comma lists expand into one test per combination,
# every output format parses, and the numbers are self-consistent.
set -eu
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--synthetic tiny -t 2 -r 2 --no-warmup --mem-bandwidth 10)
"$bin/slake-bench" "${common[@]}" -p 16,32 -n 4 -d 0,100 --kv-policy full,slake --kv-budget 48 -o jsonl >"$tmp/out.jsonl" 2>"$tmp/err"
"$bin/slake-bench" "${common[@]}" -p 0 -n 2 -d 100 --kv-policy slake --kv-budget 48 --kv-evict-every 4 -ctk f32,q8_0 -ctv q4_0 -o jsonl >"$tmp/types.jsonl" 2>/dev/null
"$bin/slake-bench" "${common[@]}" -p 16 -n 0 -o csv >"$tmp/out.csv" 2>/dev/null
"$bin/slake-bench" "${common[@]}" -p 16 -n 4 -o json >"$tmp/out.json" 2>/dev/null
"$bin/slake-bench" "${common[@]}" -p 0 -n 4 -o md >"$tmp/out.md" 2>/dev/null
# A model file whose training context (128) is shorter than the test: refused, unless asked for.
fixture="$(dirname "$0")/../fixtures/models/llama2-mha/model.gguf"
if "$bin/slake-bench" -m "$fixture" -p 200 -n 0 -r 1 --mem-bandwidth 10 >/dev/null 2>"$tmp/ctx.err"; then
  echo "a 200-token prompt past the 128-token training context was not refused" >&2; exit 1
fi
grep -q "exceed the model's context of 128" "$tmp/ctx.err"
"$bin/slake-bench" -m "$fixture" -p 200 -n 0 -r 1 --mem-bandwidth 10 --ctx-beyond-train -o jsonl >"$tmp/beyond.jsonl" 2>/dev/null
grep -q '"n_prompt": *200' "$tmp/beyond.jsonl"
python3 - "$tmp" "$0" <<'PY'
import csv, json, sys
tmp = sys.argv[1]
recs = [json.loads(l) for l in open(f"{tmp}/out.jsonl")]
# 2 policies x 2 depths x (2 prompt sizes + 1 generation test)
assert len(recs) == 12, len(recs)
combos = {(r["kv_policy"], r["n_depth"], r["n_prompt"], r["n_gen"]) for r in recs}
assert combos == {(p, d, n_p, n_g) for p in ("full", "slake") for d in (0, 100) for n_p, n_g in ((16, 0), (32, 0), (0, 4))}, combos
for r in recs:
    assert r["synthetic"] is True and r["model_filename"] == "synthetic:tiny"
    assert len(r["samples_ns"]) == 2 and all(x > 0 for x in r["samples_ns"])
    n = r["n_prompt"] or r["n_gen"]
    assert abs(r["avg_ts"] - sum(n * 1e9 / x for x in r["samples_ns"]) / 2) < 1e-6 * r["avg_ts"]
    assert r["peak_rss_bytes"] > r["model_size"]
    if r["n_gen"]:
        assert r["bytes_per_token"] >= r["model_size"] * 0.5 and r["decode_gbps"] > 0 and r["mem_bandwidth_gbps"] == 10
    if r["kv_policy"] == "slake" and r["n_depth"] == 100:
        # tiny has 4 layers x 4 KV heads x head dim 32: 2 x 32 f16 values and a 4-byte position,
        # 132 bytes per token and head; 48 tokens per head kept after the 100-token prefill (window
        # 32), plus one fp32 linear state per head.
        assert r["type_k"] == "f16" and r["type_v"] == "f16", r
        assert r["kv_bytes_start"] == 16 * (48 * 132 + (32 * 34 + 1) * 4), r["kv_bytes_start"]
        # The layers' prefix budgets share L x (C - Sw) = 4 x (48 - 32) tokens (algorithm.md §2.5):
        # what the heads hold beyond the window, counted in kv_bytes_start above.
        b = r["kv_layer_budgets"]
        assert len(b) == 4 and sum(b) == 64 and min(b) >= 0, b
    else:
        assert "kv_layer_budgets" not in r, r  # nothing was evicted
# Cache types: keys of 32 values in f32 (128 bytes) or one q8_0 block (34), values in one q4_0
# block (18), and the position.
trecs = [json.loads(l) for l in open(f"{tmp}/types.jsonl")]
assert all(r["kv_evict_every"] == 4 for r in trecs) and all(r["kv_evict_every"] == 1 for r in recs), trecs
types = {(r["type_k"], r["type_v"]): r["kv_bytes_start"] for r in trecs}
assert types == {(k, "q4_0"): 16 * (48 * (kb + 18 + 4) + (32 * 34 + 1) * 4) for k, kb in (("f32", 128), ("q8_0", 34))}, types
rows = list(csv.DictReader(open(f"{tmp}/out.csv")))
assert len(rows) == 1 and rows[0]["n_prompt"] == "16" and rows[0]["n_gen"] == "0", rows
j = json.load(open(f"{tmp}/out.json"))
assert [(r["n_prompt"], r["n_gen"]) for r in j] == [(16, 0), (0, 4)]
md = open(f"{tmp}/out.md").read().splitlines()
assert len(md) == 3 and "| tg4 |" in md[2], md
# plot.py --table: one row per generation test, its bound the bytes read over the bandwidth given.
import os, subprocess
plot = os.path.join(os.path.dirname(os.path.abspath(sys.argv[2])), "..", "..", "tools", "bench", "plot.py")
out = subprocess.run([sys.executable, plot, f"{tmp}/out.jsonl", "--table"], check=True, capture_output=True, text=True).stdout
rows = [l.split("|")[1:-1] for l in out.splitlines()[2:]]
gens = sorted((r for r in recs if r["n_gen"]), key=lambda r: r["n_depth"])
assert len(rows) == len(gens) == 4, out
for cells, r in zip(rows, gens):
    assert int(cells[0]) == r["n_depth"], (cells, r["n_depth"])
    bound_ms = r["bytes_per_token"] / 10e9 * 1e3
    assert abs(float(cells[7]) - bound_ms) <= 0.051, (cells[7], bound_ms)
    assert abs(float(cells[8]) - r["token_avg_ns"] / 1e6 / bound_ms) <= 0.006 * max(1, r["token_avg_ns"] / 1e6 / bound_ms), cells
print("slake-bench outputs: ok")
PY
grep -q "\[12/12\]" "$tmp/err" || { echo "FAIL: no progress on stderr"; cat "$tmp/err"; exit 1; }
