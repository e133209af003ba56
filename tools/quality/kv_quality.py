#!/usr/bin/env python3
"""The KV-quality suite: KL of every policy, with and without a compensator, against the full cache
at 2K, 4K and 8K tokens, kept as records and written into docs/kv-quality.md.

  run    runs slake-perplexity --kl-divergence for every cell of the matrix (context x row x budget)
         that has no current record, --together cells per process (--kv-sweep), appending each
         group's records (with the commit they ran at) to <records>/kl-<ctx>.jsonl as it finishes:
         an interrupted run loses one group, and the next run goes on where it stopped. --contexts, --rows and --budgets pick part of the matrix.
  write  renders one table per context from the records (a cell with no current record shows as
         "."), the comparison at equal bytes, and a plot of KL against KV bytes per context, and
         puts them between the suite's markers in the doc.

A record is current when its commit descends from the commit its policy last changed at
(POLICY_SINCE): when a policy's behaviour changes, that entry moves and its cells are run again.

  tools/quality/kv_quality.py run -m models/downloads/SmolLM2-135M-Instruct.F16.gguf \\
      -f ../shared/text/wikitext2-test.txt --contexts 4k --rows "cake,cake + taylor,slake-wide"
  tools/quality/kv_quality.py write
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BEGIN, END = "<!-- kv-quality-suite:begin -->", "<!-- kv-quality-suite:end -->"

# Context name -> (tokens per chunk, tokens prefilled). Every context scores 1024 or 2048 decoded
# tokens; 8K prefills 6144 so the prompt is evicted from 6K tokens.
CONTEXTS = {"2k": (2048, 1024), "4k": (4096, 2048), "8k": (8192, 6144)}
BUDGETS = [64, 128, 256, 512, 1024]
# AhaKV's rows: the policy with all three parts, each part left out in turn (the ablation), and
# CAKE's budgets with AhaKV's scores (--kv-sweep spellings, docs/algorithm.md §2.3).
AHAKV = ["ahakv", "ahakv:recent+value", "ahakv:gain+value", "ahakv:gain+recent", "cake@ahakv"]
# The SRE rows (docs/algorithm.md §2.8): slake's budgets ranked by the Taylor state's self-recall
# error, and SRE-mass sizing at three shares of the error (slake's Taylor state; the budget caps).
SRE = ["slake@sre", "slake@sre:0.5", "slake@sre:0.8", "slake@sre:0.95"]
POLICIES = ["streaming", "h2o", *AHAKV, "snapkv", "pyramidkv", "cake", "slake", *SRE, "slake-wide"]
COMPENSATORS = ["none", "taylor", "centroids"]
# What --kv-compensate auto gives; "none" for the others.
OWN_COMPENSATOR = {"slake": "taylor", **{p: "taylor" for p in SRE}}
# The commit at which each policy's behaviour last changed (records before it are stale).
POLICY_SINCE = {"slake-wide": "d500149"}


def row_label(policy, comp):
    """A row's name: the policy alone for its own compensator, else policy + compensator."""
    if policy == "full":
        return "full"
    own = OWN_COMPENSATOR.get(policy, "none")
    if comp == own:
        return policy
    return f"{policy}, no compensator" if comp == "none" else f"{policy} + {comp}"


def matrix_rows():
    return [("full", "none")] + [(p, c) for p in POLICIES for c in COMPENSATORS]


def cell_key(r):
    return (r["kv_policy"], r["kv_compensate"], 0 if r["kv_policy"] == "full" else r["kv_budget"])


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)


def descends(commit, since):
    """Whether `commit` is `since` or comes after it (unknown commits are not current)."""
    return git("merge-base", "--is-ancestor", since, commit).returncode == 0


def load(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def current(records):
    """The current record of each cell: the latest of those whose commit is at or after its
    policy's POLICY_SINCE."""
    out, checked = {}, {}
    for r in records:
        since = POLICY_SINCE.get(r["kv_policy"])
        if since:
            ok = checked.setdefault((r["commit"], since), descends(r["commit"], since))
            if not ok:
                continue
        out[cell_key(r)] = r
    return out


def parse_rows(spec):
    if not spec:
        return matrix_rows()
    rows = []
    for name in spec.split(","):
        if name.endswith("*"):  # a policy with every compensator
            hit = [(p, c) for p, c in matrix_rows() if p == name[:-1]]
        else:
            hit = [(p, c) for p, c in matrix_rows() if row_label(p, c) == name]
        if not hit:
            sys.exit(f"kv_quality: unknown row '{name}'; rows are {[row_label(p, c) for p, c in matrix_rows()]}, "
                     "or POLICY* for a policy with every compensator")
        rows += [h for h in hit if h not in rows]
    return rows


def parse_context(spec):
    """A named context (2k, 4k, 8k) or NAME=TOKENS:PREFILLED (for other models)."""
    if spec in CONTEXTS:
        return (spec, *CONTEXTS[spec])
    try:
        name, sizes = spec.split("=")
        n_ctx, prefill = (int(x) for x in sizes.split(":"))
        if name and 0 < prefill < n_ctx:
            return name, n_ctx, prefill
    except ValueError:
        pass
    sys.exit(f"kv_quality: bad context '{spec}' (one of {', '.join(CONTEXTS)}, or NAME=TOKENS:PREFILLED)")


def run(args):
    head = git("rev-parse", "--short=7", "HEAD").stdout.strip()
    if not head:
        sys.exit("kv_quality: not in a git checkout (records carry the commit they ran at)")
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    if dirty and not (args.allow_dirty or args.dry_run):
        sys.exit("kv_quality: the checkout has uncommitted changes; commit them (records carry the commit) "
                 "or pass --allow-dirty")
    os.makedirs(args.records, exist_ok=True)
    for spec in args.contexts.split(","):
        ctx_name, n_ctx, prefill = parse_context(spec)
        path = os.path.join(args.records, f"kl-{ctx_name}.jsonl")
        have = set(current(load(path)))  # read once per context
        cells = [(policy, comp, budget) for policy, comp in parse_rows(args.rows)
                 for budget in ([0] if policy == "full" else [int(b) for b in args.budgets.split(",")])
                 # a budget that holds the whole prompt evicts nothing at prefill: left out
                 if (policy == "full" or budget < prefill) and (policy, comp, budget) not in have]
        # The cells of a context run in groups that share one process (slake-perplexity --kv-sweep:
        # one reference, the decode steps batched); a group's records are appended when it ends.
        for at in range(0, len(cells), args.together):
            group = cells[at:at + args.together]
            cmd = [args.bin, "-m", args.model, "-f", args.file, "-c", str(n_ctx), "--prefill", str(prefill),
                   "--chunks", "1", "-t", str(args.threads), "--kl-divergence", "-o", "json", "--kv-window", str(args.window),
                   "--kv-sweep", ",".join(f"{p}/{c}/{b}" for p, c, b in group)]
            print(" ".join(cmd), file=sys.stderr, flush=True)
            if args.dry_run:
                continue
            recs = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            with open(path, "a") as f:
                for rec in recs:
                    rec["commit"] = head
                    f.write(json.dumps(rec) + "\n")


def num(x, digits=4):
    return f"{x:.{digits}f}" if x >= 10 ** -(digits - 1) else f"{x:.1e}"


def context_section(ctx_name, cells):
    """The table of one context: mean KL / top-1 / KV MiB per row and budget; the best row per
    budget among equal bytes in bold; then the comparison of slake-wide with the best other."""
    budgets = sorted({b for (p, c, b) in cells if p != "full"})
    if not budgets:
        return ""
    full = cells.get(("full", "none", 0))
    any_rec = next(iter(cells.values()))
    head = (f"### {ctx_name.upper()}: {any_rec['n_ctx']} tokens, {any_rec['n_prefill']} prefilled, "
            f"{any_rec['n_decode']} decoded and scored")
    if full:
        head += f" (full f16 cache: PPL {full['ppl']:.2f}, KL {num(full['kl_mean'])})"
    lines = [head, "", "| row | " + " | ".join(f"C={b}" for b in budgets) + " |",
             "|---|" + "---|" * len(budgets)]
    # At each budget the rows without a compensator hold the same bytes: the lowest of them is bold.
    # AhaKV's rows hold their selector's ring beyond the bytes shown, so they do not compete.
    best = {}
    for b in budgets:
        same = [(r["kl_mean"], (p, c)) for (p, c, bb), r in cells.items()
                if bb == b and c == "none" and p != "full" and p not in AHAKV]
        if same:
            best[b] = min(same)[1]
    for policy, comp in matrix_rows():
        if policy == "full":
            continue
        row = []
        for b in budgets:
            r = cells.get((policy, comp, b))
            if not r:
                row.append(".")
                continue
            kl = num(r["kl_mean"])
            if best.get(b) == (policy, comp):
                kl = f"**{kl}**"
            row.append(f"{kl} / {100 * r['top1_agreement']:.1f}% / {r['kv_bytes_end'] / 2**20:.2f}")
        if any(x != "." for x in row):
            lines.append(f"| {row_label(policy, comp)} | " + " | ".join(row) + " |")
    lines += ["", "Cells: mean KL(full f32 || row) / top-1 agreement / KV MiB at the end of the chunk; `.`: not run "
              "at a current commit. Bold: the lowest KL among the rows without a compensator (equal bytes)."]
    if any(p in AHAKV for (p, c, b) in cells):
        lines += ["AhaKV's rows also hold its selector's state beyond the MiB shown (up to 140 bytes per cached token "
                  "and KV head, 54% of an f16 row of SmolLM2: [AhaKV](#ahakv-h2os-scores-without-its-positional-bias)); "
                  "they are not in the bold or the comparisons."]
    cmp = []
    for b in budgets:
        wide = cells.get(("slake-wide", "none", b))
        if not wide:
            continue
        # Every other row, at any budget, holding no more bytes (within 1%: a layer's rounding moves
        # the bytes of equal budgets a little); a compensated row competes at a smaller budget.
        others = [(r["kl_mean"], f"{row_label(p, c)} C={bb}") for (p, c, bb), r in cells.items()
                  if p not in ("full", "slake-wide", *AHAKV) and r["kv_bytes_end"] <= 1.01 * wide["kv_bytes_end"]]
        if others:
            kl, label = min(others)
            cmp.append(f"| {b} | {label}: {num(kl)} | {num(wide['kl_mean'])} | {100 * (wide['kl_mean'] / kl - 1):+.1f}% |")
    if cmp:
        lines += ["", "slake-wide against the best other row holding no more bytes (within 1%), at any budget:", "",
                  "| C | best other (at most slake-wide's bytes) | slake-wide | change |", "|---:|---|---:|---:|"] + cmp
    lines += compensator_effect(cells, budgets)
    return "\n".join(lines)


def compensator_effect(cells, budgets):
    """What each compensator does to its policy's eviction alone (the same selector and budgets):
    the change in mean KL from the row without a compensator, per policy and budget."""
    rows = []
    for policy in POLICIES:
        base = {b: cells.get((policy, "none", b)) for b in budgets}
        row = []
        for b in budgets:
            parts = []
            for comp in ("taylor", "centroids"):
                r = cells.get((policy, comp, b))
                parts.append(f"{100 * (r['kl_mean'] / base[b]['kl_mean'] - 1):+.1f}%" if r and base[b] else ".")
            row.append(" / ".join(parts))
        if any(x != ". / ." for x in row):
            rows.append(f"| {policy} | " + " | ".join(row) + " |")
    if not rows:
        return []
    return ["", "Each compensator against its policy's eviction alone (same selector and budgets): change in mean KL, "
            "taylor / centroids:", "", "| policy | " + " | ".join(f"C={b}" for b in budgets) + " |",
            "|---|" + "---:|" * len(budgets)] + rows


def plot(ctx_name, cells, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for policy, comp in matrix_rows():
        pts = sorted((r["kv_bytes_end"] / 2**20, r["kl_mean"]) for (p, c, b), r in cells.items()
                     if (p, c) == (policy, comp) and p != "full")
        if pts:
            style = "-" if comp == OWN_COMPENSATOR.get(policy, "none") else ":"
            ax.plot([x for x, _ in pts], [y for _, y in pts], style, marker="o", label=row_label(policy, comp))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("KV bytes at the end of the chunk (MiB)")
    ax.set_ylabel("mean KL(full || policy), nats")
    ax.set_title(f"SmolLM2-135M-Instruct, {ctx_name.upper()}, f16 cache")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(args):
    parts = [BEGIN, "", "<!-- written by tools/quality/kv_quality.py write; edit the tool, not this part -->", ""]
    found = {f[3:-6]: current(load(os.path.join(args.records, f))) for f in os.listdir(args.records)
             if f.startswith("kl-") and f.endswith(".jsonl")} if os.path.isdir(args.records) else {}
    for ctx_name, cells in sorted(found.items(), key=lambda kv: min((r["n_ctx"] for r in kv[1].values()), default=0)):
        section = context_section(ctx_name, cells)
        if not section:
            continue
        parts += [section, ""]
        if not args.no_plot:
            png = f"kv-quality-suite-{ctx_name}.png"
            plot(ctx_name, cells, os.path.join(os.path.dirname(args.doc), png))
            parts += [f"![KL against KV bytes at {ctx_name.upper()}]({png})", ""]
    parts.append(END)
    block = "\n".join(parts)
    with open(args.doc) as f:
        doc = f.read()
    if doc.count(BEGIN) != 1 or doc.count(END) != 1 or doc.index(BEGIN) > doc.index(END):
        sys.exit(f"kv_quality: {args.doc} needs one '{BEGIN}' line before one '{END}' line")
    doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
    with open(args.doc, "w") as f:
        f.write(doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("-m", "--model", default=os.path.join(ROOT, "models/downloads/SmolLM2-135M-Instruct.F16.gguf"))
    r.add_argument("-f", "--file", default=os.path.join(ROOT, "../shared/text/wikitext2-test.txt"))
    r.add_argument("--bin", default=os.path.join(ROOT, "build/bin/slake-perplexity"))
    r.add_argument("--contexts", default=",".join(CONTEXTS))
    r.add_argument("--rows", help="row names (as the tables name them) or POLICY* for a policy with every compensator, "
                   "comma-separated (default: every row)")
    r.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    r.add_argument("--window", type=int, default=32)
    r.add_argument("-t", "--threads", type=int, default=2)
    r.add_argument("--records", default=os.path.join(ROOT, "docs/bench/quality"))
    r.add_argument("--together", type=int, default=8,
                   help="cells run in one process (decoded together); an interrupted run loses that group")
    r.add_argument("--dry-run", action="store_true", help="print the commands of the missing cells only")
    r.add_argument("--allow-dirty", action="store_true", help="run with uncommitted changes (the records say HEAD)")
    w = sub.add_parser("write")
    w.add_argument("--records", default=os.path.join(ROOT, "docs/bench/quality"))
    w.add_argument("--doc", default=os.path.join(ROOT, "docs/kv-quality.md"))
    w.add_argument("--no-plot", action="store_true")
    args = ap.parse_args()
    run(args) if args.cmd == "run" else write(args)


if __name__ == "__main__":
    main()
