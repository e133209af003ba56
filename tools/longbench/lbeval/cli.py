"""Command line: predict, score, or run (both, then the table).

Exit status: 0 when everything ran; 1 when the command could not run (a config file missing or
unreadable, an output directory that cannot be written); 2 for bad arguments; 3 when it finished
but something was left out (a malformed record, a missing data file, a request the engine refused,
a run that stopped), each named in a warning on stderr."""
import argparse
import json
import os
import shlex
import sys

from . import data, protocol, runs, score, table
from .predict import Reporter, predict

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DEFAULT_POLICIES = ["full", "slake"]
DEFAULT_BUDGETS = [128, 1024]


def comma_list(s):
    return [x.strip() for x in s.split(",") if x.strip()]


def budget_list(s):
    try:
        values = [int(x) for x in comma_list(s)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"budgets must be integers, got {s!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"budgets must be positive integers, got {s!r}")
    return values


def shard_spec(s):
    try:
        i, n = (int(x) for x in s.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes i/n (0 <= i < n), got {s!r}") from None
    if n < 1 or not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"--shard takes i/n (0 <= i < n), got {s!r}")
    return i, n


def add_common(p):
    p.add_argument("--out", required=True, help="output directory (one subdirectory per policy and budget)")
    p.add_argument("--datasets", type=comma_list,
                   help="comma-separated datasets (default: the 16 English ones; with --e the 13 of LongBench-E)")
    p.add_argument("--e", action="store_true", help="LongBench-E: {dataset}_e.jsonl, scored per length bucket")
    p.add_argument("--limit", type=int, default=0, help="only the first N records of each dataset (0: all)")


def add_predict(p):
    p.add_argument("--data", required=True, help="LongBench v1 data directory ({dataset}.jsonl, {dataset}_e.jsonl)")
    p.add_argument("--config", required=True,
                   help="LongBench config directory (dataset2prompt.json, dataset2maxlen.json)")
    p.add_argument("-m", "--model", required=True, help="GGUF file or Hugging Face directory")
    p.add_argument("--policies", type=comma_list, default=DEFAULT_POLICIES,
                   help=f"comma-separated KV policies (default: {','.join(DEFAULT_POLICIES)}; full runs once)")
    p.add_argument("--budgets", type=budget_list, default=DEFAULT_BUDGETS,
                   help=f"comma-separated KV budgets C (default: {','.join(map(str, DEFAULT_BUDGETS))})")
    p.add_argument("--max-length", type=int, help="prompt length in tokens beyond which the middle is cut "
                   "(default: by --model-family)")
    p.add_argument("--model-family", choices=sorted(protocol.MAX_LENGTH),
                   help="llama3.1 (127500), mistral (31500) or llama2 (3500); default: guessed from the model's name")
    p.add_argument("--no-chat-template", action="store_true",
                   help="a base model: no prompt goes through a chat template")
    p.add_argument("-c", "--ctx-size", type=int, default=0,
                   help="slake-cli's -c: prompt plus reply must fit (0: the model's training context)")
    p.add_argument("-t", "--threads", type=int, default=0, help="slake-cli's -t (0: its default)")
    p.add_argument("--engine-args", type=shlex.split, default=[],
                   help="more slake-cli flags, one string (e.g. \"--kv-window 16 --chat-template llama3\")")
    p.add_argument("--slake-cli", default=os.path.join(REPO, "build", "bin", "slake-cli"),
                   help="the slake-cli binary (default: build/bin/slake-cli of this checkout)")
    p.add_argument("--shard", type=shard_spec, default=(0, 1),
                   help="i/n: only records i, i+n, i+2n, ... (several processes or GPUs, one shard each)")


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="longbench.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="generate the predictions")
    add_common(p)
    add_predict(p)
    p = sub.add_parser("score", help="score the predictions under --out and write the table")
    add_common(p)
    p.add_argument("--data", help="the data directory: reports records without a prediction")
    p.add_argument("--policies", type=comma_list, help="row order of the table (default: as found)")
    p = sub.add_parser("run", help="predict, then score and write the table")
    add_common(p)
    add_predict(p)
    args = ap.parse_args(argv)
    if args.limit < 0:
        ap.error("--limit must be >= 0")
    if args.datasets is None:
        args.datasets = list(protocol.LONGBENCH_E if args.e else protocol.ENGLISH)
    if args.command in ("predict", "run"):
        if args.max_length is None:
            family = args.model_family or protocol.guess_family(args.model)
            if family is None:
                ap.error(f"cannot tell the model family from '{args.model}'; give --max-length N or --model-family")
            args.max_length = protocol.MAX_LENGTH[family]
        if args.max_length < 2:
            ap.error("--max-length must be >= 2")
        if not args.policies:
            ap.error("--policies is empty")
        if args.command == "run" and args.shard[1] > 1:
            ap.error("with --shard, run 'predict --shard i/n' in each process, then 'score' once")
    return args


def expected_ids(args, rep, datasets=None):
    """{dataset: [_id, ...]} of the selected records of every shard, or None without --data."""
    if datasets is None:
        if not getattr(args, "data", None):
            return None
        datasets = []
        for ds in args.datasets:
            path = data.data_path(args.data, ds, args.e)
            try:
                datasets.append((ds, None, None, data.load_records(path, ds, [], args.e, rep.warn)))
            except (OSError, UnicodeDecodeError) as e:
                rep.warn(f"{path}: cannot read it ({e})")
    return {ds: [r["_id"] for r in data.select(recs, args.limit, (0, 1))] for ds, _, _, recs in datasets}


def score_all(args, rep, expected):
    found = runs.find_runs(args.out)
    if not found:
        rep.warn(f"{args.out}: no runs to score (no */run.json)")
        return False
    rows = []
    for run_dir, info in found:
        result = score.score_run(run_dir, args.datasets, args.e, expected, rep.warn)
        rows.append({"run": os.path.basename(run_dir), "policy": info["policy"], "budget": info["budget"],
                     "scores": result})
    scored = [d for d in args.datasets if any(d in r["scores"] for r in rows)]
    policies = args.policies or []
    suffix = "_e" if args.e else ""
    if args.e:
        md = "".join(table.markdown(rows, scored, policies, bucket=b, title=f"**LongBench-E, length {b}**") + "\n"
                     for b in score.BUCKETS)
    else:
        md = table.markdown(rows, scored, policies)
    with open(os.path.join(args.out, f"table{suffix}.md"), "w", encoding="utf-8") as f:
        f.write(md)
    with open(os.path.join(args.out, f"results{suffix}.json"), "w", encoding="utf-8") as f:
        json.dump({"longbench_e": args.e, "datasets": table.ordered_datasets(scored), "runs": rows}, f,
                  ensure_ascii=False, indent=2)
        f.write("\n")
    sys.stdout.write(md)
    return True


def main(argv=None):
    args = parse_args(argv)
    rep = Reporter()
    ok = True
    try:
        if args.command in ("predict", "run"):
            os.makedirs(args.out, exist_ok=True)
            datasets, ok = predict(args, rep)
            if args.command == "run":
                ok = score_all(args, rep, expected_ids(args, rep, datasets)) and ok
        else:
            ok = score_all(args, rep, expected_ids(args, rep))
    except data.FatalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; a rerun goes on where this one stopped", file=sys.stderr)
        return 130
    if rep.count:
        print(f"{rep.count} warning(s); see above", file=sys.stderr)
    return 0 if ok and rep.count == 0 else 3
