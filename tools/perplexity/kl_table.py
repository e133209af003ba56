#!/usr/bin/env python3
"""KL divergence of every KV policy against the full cache, as a markdown table.

Runs build/bin/slake-perplexity --kl-divergence for each policy (plus the SLAKE ablation rows:
cake with the Taylor compensator, slake without it) at each budget, and prints one table row per
policy with mean KL, p99 KL and top-1 agreement per budget, and a second table of the KV bytes at
the end of the chunk. --rows picks rows by label; --cache-types repeats every row for each KV cache
type (-ctk/-ctv; the reference is always the full cache in f32, so the full row of a type is what
the type alone costs); --evict-every passes --kv-evict-every; --json-out keeps every run's record;
--plot draws mean KL against KV bytes (matplotlib, from the tools' venv); --from-json prints the tables
and plot of saved --json-out files (several merge) without running anything.

  tools/perplexity/kl_table.py -m ../shared/models/stories260K.gguf -f ../shared/text/tinyshakespeare.txt \
      --budgets 32,64,128 --window 16 --chunks 20
"""
import argparse
import json
import subprocess
import sys

ROWS = [  # (label, policy, compensator, extra arguments)
    ("full", "full", "none", ()),
    ("streaming", "streaming", "none", ()),
    ("h2o", "h2o", "none", ()),
    ("snapkv", "snapkv", "none", ()),
    ("pyramidkv", "pyramidkv", "none", ()),
    ("cake (eviction)", "cake", "none", ()),
    ("cake + Taylor (+ PTAA)", "cake", "taylor", ()),
    ("slake without Taylor (VABS only)", "slake", "none", ()),
    ("slake (+ PTAA + VABS)", "slake", "taylor", ()),
    ("cake + centroids", "cake", "centroids", ()),
    ("slake with centroids", "slake", "centroids", ()),
    ("cake + 8 centroids", "cake", "centroids", ("--kv-centroids", "8")),
    ("slake with 8 centroids", "slake", "centroids", ("--kv-centroids", "8")),
    ("slake-wide + Taylor (+ PTAA)", "slake-wide", "taylor", ()),
    ("slake-wide", "slake-wide", "none", ()),
]


def num(x, digits):
    """x with `digits` decimals, or in scientific notation where that would show no digit."""
    return f"{x:.{digits}f}" if x >= 10 ** -(digits - 1) else f"{x:.1e}"


def run(args, policy, compensate, extra, budget, cache_type):
    cmd = [args.bin, "-m", args.model, "-f", args.file, "-c", str(args.ctx), "--chunks", str(args.chunks), "-t",
           str(args.threads), "--kl-divergence", "-o", "json", "--kv-policy", policy, "--kv-compensate", compensate,
           "--kv-window", str(args.window), "--kv-evict-every", str(args.evict_every), *extra]
    if args.prefill:
        cmd += ["--prefill", str(args.prefill)]
    if cache_type:
        cmd += ["-ctk", cache_type, "-ctv", cache_type]
    if policy != "full":
        cmd += ["--kv-budget", str(budget)]
    print(" ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def tables(records, window, evict_every):
    """The KL table and the KV-bytes table of `records`, one row per label in first-seen order."""
    labels = list(dict.fromkeys(r["label"] for r in records))
    budgets = sorted({r["kv_budget"] for r in records if r["kv_policy"] != "full"})
    header = "| policy | " + " | ".join(f"C={b}: mean KL / p99 KL / top-1" for b in budgets) + " |"
    lines = [header, "|---|" + "---|" * len(budgets)]
    byte_lines = ["| policy | " + " | ".join(f"C={b}: KV MiB" for b in budgets) + " |", "|---|" + "---|" * len(budgets)]
    for label in labels:
        mine = [r for r in records if r["label"] == label]
        cells, byte_cells = [], []
        for b in budgets:
            hit = [r for r in mine if r["kv_policy"] == "full" or r["kv_budget"] == b]
            if not hit:
                cells.append("")
                byte_cells.append("")
                continue
            r = hit[-1]
            cells.append(f"{num(r['kl_mean'], 4)} / {num(r['kl_p99'], 3)} / {100 * r['top1_agreement']:.1f}% (PPL {r['ppl']:.2f})")
            byte_cells.append(f"{r['kv_bytes_end'] / 2**20:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
        byte_lines.append(f"| {label} | " + " | ".join(byte_cells) + " |")
    info = records[-1]
    head = (f"{info['chunks']} chunks of {info['n_ctx']} tokens ({info['n_prefill']} prefilled, {info['n_decode']} decoded "
            f"and scored), window {window}, --kv-evict-every {evict_every}, {info['scored_tokens']} scored tokens; "
            f"full-cache (f32) PPL {info['full_ppl']:.3f}\n")
    return head + "\n" + "\n".join(lines) + "\n\nKV bytes at the end of a chunk (exact cache + linear or centroid states):\n\n" + \
        "\n".join(byte_lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model")
    ap.add_argument("-f", "--file")
    ap.add_argument("--bin", default="build/bin/slake-perplexity")
    ap.add_argument("--budgets", default="32,64,128")
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("-c", "--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=-1)
    ap.add_argument("--prefill", type=int, help="tokens prefilled per chunk (default: half, as slake-perplexity)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rows", help="comma-separated row labels (default: every row)")
    ap.add_argument("--cache-types", help="comma-separated KV cache types, each row run in each (default: the tool's)")
    ap.add_argument("--evict-every", type=int, default=1, help="--kv-evict-every of every run")
    ap.add_argument("--json-out", help="write every run's record here (rewritten after each run)")
    ap.add_argument("--from-json", nargs="+", help="print the tables of these --json-out files instead of running")
    ap.add_argument("--plot", help="write a plot of mean KL against KV bytes here (PNG)")
    args = ap.parse_args()
    if args.from_json:
        records = [r for path in args.from_json for r in json.load(open(path))]
        print(tables(records, records[-1]["kv_window"], records[-1]["kv_evict_every"]))
        if args.plot:
            plot(records, args.plot)
        return
    if not args.model or not args.file:
        sys.exit("kl_table: -m and -f are required (or --from-json)")
    budgets = [int(b) for b in args.budgets.split(",")]
    rows = ROWS
    if args.rows:
        wanted = args.rows.split(",")
        unknown = [w for w in wanted if w not in [r[0] for r in ROWS]]
        if unknown:
            sys.exit(f"kl_table: unknown rows {unknown}; known: {[r[0] for r in ROWS]}")
        rows = [r for r in ROWS if r[0] in wanted]
    if args.cache_types:
        rows = [(f"{label} [{t}]", policy, comp, extra, t) for t in args.cache_types.split(",") for label, policy, comp, extra in rows]
    else:
        rows = [(label, policy, comp, extra, None) for label, policy, comp, extra in rows]
    records = []
    for label, policy, comp, extra, cache_type in rows:
        for b in budgets:
            records.append(dict(run(args, policy, comp, extra, b, cache_type), label=label))
            if args.json_out:
                with open(args.json_out, "w") as f:
                    json.dump(records, f, indent=1)
            if policy == "full":
                break
    print(tables(records, args.window, args.evict_every))
    if args.plot:
        plot(records, args.plot)


def plot(records, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in dict.fromkeys(r["label"] for r in records):
        pts = sorted((r["kv_bytes_end"] / 2**20, r["kl_mean"]) for r in records if r["label"] == label and r["kv_policy"] != "full")
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("KV bytes at the end of a chunk (MiB)")
    ax.set_ylabel("mean KL(full || policy), nats")
    r0 = records[0]
    ax.set_title(f"{r0['model'].split('/')[-1]}, {r0['n_ctx']} tokens")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
