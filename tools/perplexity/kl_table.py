#!/usr/bin/env python3
"""KL divergence of every KV policy against the full cache, as a markdown table.

Runs build/bin/slake-perplexity --kl-divergence for each policy (plus the SLAKE ablation rows:
cake with the Taylor compensator, slake without it) at each budget, and prints one table row per
policy with mean KL, p99 KL and top-1 agreement per budget. Only the standard library is used.

  tools/perplexity/kl_table.py -m ../shared/models/stories260K.gguf -f ../shared/text/tinyshakespeare.txt \
      --budgets 32,64,128 --window 16 --chunks 20
"""
import argparse
import json
import subprocess
import sys

ROWS = [  # (label, policy, compensator)
    ("full", "full", "none"),
    ("streaming", "streaming", "none"),
    ("h2o", "h2o", "none"),
    ("snapkv", "snapkv", "none"),
    ("pyramidkv", "pyramidkv", "none"),
    ("cake (eviction)", "cake", "none"),
    ("cake + Taylor (+ PTAA)", "cake", "taylor"),
    ("slake without Taylor (VABS only)", "slake", "none"),
    ("slake (+ PTAA + VABS)", "slake", "taylor"),
]


def run(args, policy, compensate, budget):
    cmd = [args.bin, "-m", args.model, "-f", args.file, "-c", str(args.ctx), "--chunks", str(args.chunks), "-t",
           str(args.threads), "--kl-divergence", "-o", "json", "--kv-policy", policy, "--kv-compensate", compensate,
           "--kv-window", str(args.window)]
    if policy != "full":
        cmd += ["--kv-budget", str(budget)]
    print(" ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-f", "--file", required=True)
    ap.add_argument("--bin", default="build/bin/slake-perplexity")
    ap.add_argument("--budgets", default="32,64,128")
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("-c", "--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=-1)
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]

    header = "| policy | " + " | ".join(f"C={b}: mean KL / p99 KL / top-1" for b in budgets) + " |"
    lines = [header, "|---|" + "---|" * len(budgets)]
    info = None
    for label, policy, comp in ROWS:
        cells = []
        for b in budgets:
            r = run(args, policy, comp, b)
            info = r
            cells.append(f"{r['kl_mean']:.4f} / {r['kl_p99']:.3f} / {100 * r['top1_agreement']:.1f}% (PPL {r['ppl']:.2f})")
            if policy == "full":
                cells = [cells[0]] * len(budgets)
                break
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    print(f"{info['chunks']} chunks of {info['n_ctx']} tokens ({info['n_prefill']} prefilled, {info['n_decode']} decoded "
          f"and scored), window {args.window}, {info['scored_tokens']} scored tokens; full-cache PPL {info['full_ppl']:.3f}\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
