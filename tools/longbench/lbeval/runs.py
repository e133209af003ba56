"""The output directory: one directory per (policy, budget) run, holding run.json (what produced
the predictions), pred/ (or pred_e/ for LongBench-E) with one JSONL file of predictions per dataset
(per dataset and shard with --shard), result.json (result_e.json) and engine.log."""
import glob
import json
import os


def run_name(policy, budget):
    return policy if policy == "full" else f"{policy}-{budget}"


def plan_runs(policies, budgets):
    """(policy, budget) pairs: the full cache once (a budget means nothing to it), every other
    policy at every budget."""
    runs = []
    for p in policies:
        if p == "full":
            runs.append(("full", 0))
        else:
            runs.extend((p, b) for b in budgets)
    return runs


def pred_dir(run_dir, longbench_e):
    return os.path.join(run_dir, "pred_e" if longbench_e else "pred")


def own_pred_path(run_dir, dataset, longbench_e, shard):
    i, n = shard
    name = f"{dataset}.jsonl" if n == 1 else f"{dataset}.shard{i}of{n}.jsonl"
    return os.path.join(pred_dir(run_dir, longbench_e), name)


def pred_paths(run_dir, dataset, longbench_e):
    """Every prediction file of a dataset in a run, whichever shard wrote it."""
    d = pred_dir(run_dir, longbench_e)
    paths = [os.path.join(d, f"{dataset}.jsonl")]
    paths += sorted(glob.glob(os.path.join(glob.escape(d), glob.escape(dataset) + ".shard*of*.jsonl")))
    return [p for p in paths if os.path.isfile(p)]


def repair_partial_line(path, note):
    """Cuts an unfinished last line (a run killed mid-write) so that appending stays valid JSONL."""
    if not os.path.isfile(path):
        return
    with open(path, "rb+") as f:
        data = f.read()
        if not data or data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        f.truncate(keep)
    note(f"{path}: its last line was unfinished (an interrupted run); removed, that record runs again")


def read_predictions(paths, warn, quiet_last_line=False):
    """_id -> prediction record, first one wins, in file order. A line that is not a prediction
    is reported and skipped (an unfinished last line of another shard's file is skipped quietly
    with quiet_last_line: that shard may be writing it now)."""
    preds = {}
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        for line_no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                if not (quiet_last_line and line_no == len(lines)):
                    warn(f"{path}:{line_no}: not a JSON prediction; skipped")
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("_id"), str) or not isinstance(rec.get("pred"), str):
                warn(f"{path}:{line_no}: not a prediction (needs \"_id\" and \"pred\"); skipped")
                continue
            preds.setdefault(rec["_id"], rec)
    return preds


def write_run_info(run_dir, info):
    """Records what makes the predictions (model, policy, budget, protocol settings); refuses a
    directory whose predictions came from something else, so that a resumed run never mixes them.
    Returns an error message, or None."""
    path = os.path.join(run_dir, "run.json")
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            return f"{path}: cannot read it ({e})"
        for key, value in info.items():
            if old.get(key) != value:
                return (f"{path}: these predictions were made with {key} = {old.get(key)!r}, this run has "
                        f"{value!r}; give another --out, or remove {run_dir}")
        return None
    os.makedirs(run_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    return None


def read_run_info(run_dir):
    try:
        with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
    return info if isinstance(info, dict) and "policy" in info and "budget" in info else None


def find_runs(out_dir):
    """(run_dir, info) of every run under out_dir, in name order."""
    found = []
    if not os.path.isdir(out_dir):
        return found
    for name in sorted(os.listdir(out_dir)):
        d = os.path.join(out_dir, name)
        info = read_run_info(d) if os.path.isdir(d) else None
        if info is not None:
            found.append((d, info))
    return found
