#!/usr/bin/env python3
"""Plots slake-bench results: decode latency per token and peak memory against context length,
one line per KV policy (the shape of SLAKE's Figure 4).

  build/bin/slake-bench --synthetic llama-3.1-8b -p 0 -n 32 -d 1024,4096,16384 \
      --kv-policy full,slake --kv-budget 256 -o json > bench.json
  tools/bench/plot.py bench.json -o bench.png

Reads JSON (an array) or JSONL; uses the generation tests (n_gen > 0), with the context length
taken as n_depth. Needs matplotlib (tools/bench/requirements.txt).

  tools/bench/plot.py bench.json --table

prints instead a markdown table of the same tests that checks each decode figure against the
bandwidth arithmetic: the bytes a step reads (weights + KV cache in use) over the machine's
measured bandwidth is the fastest a step can be; "x bound" is the measured mean over that.
"""
import argparse
import json
from collections import defaultdict


def load(path):
    text = open(path).read().strip()
    if text.startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def series(records):
    """{(model, label): [(depth, latency_ms, peak_rss_gib, kv_mib), ...]} sorted by depth."""
    out = defaultdict(list)
    for r in records:
        if not r.get("n_gen"):
            continue
        out[(r["model_type"], label_of(r))].append(
            (r["n_depth"], r["token_avg_ns"] / 1e6, r["peak_rss_bytes"] / 2**30, r["kv_bytes"] / 2**20))
    return {k: sorted(v) for k, v in out.items()}


def label_of(r):
    label = r["kv_policy"] if r["kv_policy"] == "full" or not r["kv_budget"] else f"{r['kv_policy']} C={r['kv_budget']}"
    if r.get("kv_evict_every", 1) > 1:
        label += f" every {r['kv_evict_every']}"
    types = {r.get("type_k", "f16"), r.get("type_v", "f16")}
    return label if types == {"f16"} else label + " " + "/".join(dict.fromkeys([r.get("type_k", "f16"), r.get("type_v", "f16")]))


def table(records):
    """Markdown rows: one per generation test, by model, context, then policy as given."""
    head = ("| context | policy | ms/token mean | p50 | p99 | tokens/s | MiB read/token | bound ms "
            "| x bound | KV MiB | peak RSS MiB |")
    lines = [head, "|---:|---|" + "---:|" * 9]
    for r in sorted((r for r in records if r.get("n_gen")), key=lambda r: (r["model_type"], r["n_depth"])):
        bound_ms = r["bytes_per_token"] / (r["mem_bandwidth_gbps"] * 1e9) * 1e3
        mean_ms = r["token_avg_ns"] / 1e6
        lines.append("| %d | %s | %.1f | %.1f | %.1f | %.2f | %.0f | %.1f | %.2f | %.1f | %.0f |" % (
            r["n_depth"], label_of(r), mean_ms, r["token_p50_ns"] / 1e6, r["token_p99_ns"] / 1e6, r["avg_ts"],
            r["bytes_per_token"] / 2**20, bound_ms, mean_ms / bound_ms, r["kv_bytes"] / 2**20,
            r["peak_rss_bytes"] / 2**20))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="slake-bench -o json or -o jsonl output")
    ap.add_argument("-o", "--output", default="bench.png")
    ap.add_argument("--table", action="store_true", help="print the markdown table instead of plotting")
    args = ap.parse_args()
    if args.table:
        print(table(load(args.input)))
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = series(load(args.input))
    if not data:
        raise SystemExit(f"{args.input}: no generation tests (n_gen > 0) to plot")
    fig, (lat, mem) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (model, label), pts in sorted(data.items()):
        d = [p[0] for p in pts]
        lat.plot(d, [p[1] for p in pts], marker="o", label=f"{label}")
        mem.plot(d, [p[2] for p in pts], marker="o", label=f"{label}")
    models = sorted({m for m, _ in data})
    for ax, title, unit in ((lat, "decode latency per token", "ms"), (mem, "peak memory (resident)", "GiB")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(", ".join(models))
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
