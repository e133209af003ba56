#!/usr/bin/env python3
"""Where in the prompt each KV setting keeps its tokens: a plot of the kv_kept_positions histograms
of slake-perplexity's JSON records (the prompt tokens the global layers' KV heads hold after
prefill, in 32 equal stretches of the prompt), as a share of the tokens kept, one line per
setting. A policy without positional bias keeps about as much of each stretch as its scores
deserve; accumulated attention (h2o) favours the start (docs/kv-quality.md, "AhaKV").

  build/bin/slake-perplexity -m models/downloads/SmolLM2-135M-Instruct.F16.gguf \\
      -f ../shared/text/wikitext2-test.txt -c 4096 --prefill 3072 --chunks 1 -o json \\
      --kv-sweep h2o/none/256,ahakv/none/256,snapkv/none/256 > kept.json
  tools/perplexity/kept_positions.py kept.json -o docs/kept-positions-4k.png
"""
import argparse
import json


def load(path):
    with open(path) as f:
        text = f.read().strip()
    if text.startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def shares(rec):
    counts = rec["kv_kept_positions"]
    total = sum(counts)
    return [c / total for c in counts] if total else counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+", help="slake-perplexity -o json output (a list) or JSON lines")
    ap.add_argument("-o", "--out", required=True, help="the PNG to write")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    recs = [r for path in args.records for r in load(path) if r.get("kv_kept_positions")]
    if not recs:
        raise SystemExit("kept_positions: no record holds kv_kept_positions (an evicting setting on the cpu backend)")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for r in recs:
        s = shares(r)
        n = len(s)
        x = [(i + 0.5) / n for i in range(n)]
        ax.plot(x, s, marker=".", label=f"{r['kv_policy']} C={r['kv_budget']}")
        print(f"{r['kv_policy']:24s} C={r['kv_budget']:5d}  first quarter {sum(s[:n // 4]):.3f}  "
              f"middle half {sum(s[n // 4:3 * n // 4]):.3f}  last quarter {sum(s[3 * n // 4:]):.3f}")
    n_prefill = recs[0]["n_prefill"]
    ax.set_xlabel(f"position in the prompt (fraction of {n_prefill} tokens)")
    ax.set_ylabel("share of the kept prompt tokens")
    ax.set_yscale("log")
    ax.set_title(args.title or f"Prompt tokens kept after prefill, {recs[0]['model'].split('/')[-1]}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
