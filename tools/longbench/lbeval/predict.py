"""The predict step: every selected record of every dataset through one slake-cli process per
(policy, budget), each prediction appended to its file as soon as it comes, finished _ids skipped."""
import json
import os
import sys
import time

from tqdm import tqdm

from . import data, protocol, runs
from .engine import Engine, EngineDied, engine_command

# The same engine error this many times in a row ends a run (a model without a chat template, say).
MAX_SAME_ERRORS = 5


class Reporter:
    """Warnings on stderr (above the progress bars), counted."""

    def __init__(self):
        self.count = 0

    def warn(self, msg):
        self.count += 1
        tqdm.write(f"warning: {msg}", file=sys.stderr)

    def info(self, msg):
        tqdm.write(msg, file=sys.stderr)


def load_datasets(args, rep):
    """[(dataset, template, max_new_tokens, records)] for the datasets that can run; the others are
    reported and left out."""
    prompts, maxlens = data.load_config(args.config)
    out = []
    for ds in args.datasets:
        try:
            template, maxlen, fields = data.check_dataset_config(ds, prompts, maxlens, args.config)
        except ValueError as e:
            rep.warn(f"{e}; dataset {ds} skipped")
            continue
        path = data.data_path(args.data, ds, args.e)
        try:
            records = data.load_records(path, ds, fields, args.e, rep.warn)
        except FileNotFoundError:
            rep.warn(f"{path}: no such file; dataset {ds} skipped")
            continue
        except (OSError, UnicodeDecodeError) as e:
            rep.warn(f"{path}: cannot read it ({e}); dataset {ds} skipped")
            continue
        if ds not in protocol.METRIC:
            rep.warn(f"{ds}: not a LongBench dataset this scorer knows; it is predicted but cannot be scored")
        out.append((ds, template, maxlen, records))
    return out


def run_info(args, policy, budget):
    return {
        "model": os.path.abspath(args.model),
        "policy": policy,
        "budget": budget,
        "max_length": args.max_length,
        "chat_template": not args.no_chat_template,
        "engine_args": list(args.engine_args),
    }


def predict_run(args, policy, budget, datasets, rep):
    """Returns False when the run had to stop (the engine died or rejects everything)."""
    run_dir = os.path.join(args.out, runs.run_name(policy, budget))
    problem = runs.write_run_info(run_dir, run_info(args, policy, budget))
    if problem:
        rep.warn(f"{problem}; run skipped")
        return False
    os.makedirs(runs.pred_dir(run_dir, args.e), exist_ok=True)
    cmd = engine_command(args.slake_cli, args.model, policy, budget, args.ctx_size, args.threads, args.engine_args)
    engine = None
    try:
        for ds, template, maxlen, records in datasets:
            selected = data.select(records, args.limit, args.shard)
            own = runs.own_pred_path(run_dir, ds, args.e, args.shard)
            runs.repair_partial_line(own, rep.info)
            done = runs.read_predictions(runs.pred_paths(run_dir, ds, args.e), rep.warn, quiet_last_line=True)
            todo = [r for r in selected if r["_id"] not in done]
            name = runs.run_name(policy, budget)
            with tqdm(total=len(selected), initial=len(selected) - len(todo), desc=f"{name} {ds}", unit="rec",
                      file=sys.stderr, dynamic_ncols=True, leave=True) as bar:
                if not todo:
                    continue
                if engine is None:
                    engine = Engine(cmd, os.path.join(run_dir, "engine.log"))
                if not predict_dataset(engine, ds, template, maxlen, todo, own, args, rep, bar):
                    return False
    except EngineDied as e:
        rep.warn(f"run {runs.run_name(policy, budget)} stopped: {e}")
        return False
    finally:
        if engine is not None:
            engine.close()
    return True


def predict_dataset(engine, ds, template, maxlen, todo, own_path, args, rep, bar):
    last_error, same = None, 0
    with open(own_path, "a", encoding="utf-8") as out:
        for rec in todo:
            try:
                req = protocol.build_request(ds, rec, template, maxlen, args.max_length, not args.no_chat_template)
            except (KeyError, IndexError, ValueError, AttributeError) as e:
                rep.warn(f"{ds} _id {rec['_id']}: the prompt template cannot be filled ({e!r}); record skipped")
                continue
            t0 = time.monotonic()
            resp = engine.request(req)
            if "error" in resp:
                err = str(resp["error"])
                rep.warn(f"{ds} _id {rec['_id']}: slake-cli: {err}")
                reason = err.split(": ", 1)[-1]  # without "request line N: "
                same = same + 1 if reason == last_error else 1
                last_error = reason
                if same >= MAX_SAME_ERRORS:
                    rep.warn(f"{ds}: {same} requests in a row failed with \"{reason}\"; giving up on this run")
                    return False
                continue
            last_error, same = None, 0
            pred = {
                "_id": rec["_id"],
                "pred": resp.get("text", ""),
                "answers": rec["answers"],
                "all_classes": rec.get("all_classes"),
                "length": rec.get("length"),
                "n_prompt_tokens_in": resp.get("n_prompt_tokens_in"),
                "n_prompt_tokens": resp.get("n_prompt_tokens"),
                "truncated": resp.get("truncated"),
                "n_gen": resp.get("n_gen"),
                "stop_reason": resp.get("stop_reason"),
                "seconds": round(time.monotonic() - t0, 4),
            }
            if resp.get("stop_reason") == "context":
                rep.warn(f"{ds} _id {rec['_id']}: the reply stopped at a full context after {resp.get('n_gen')} "
                         f"tokens (raise --ctx-size)")
            out.write(json.dumps(pred, ensure_ascii=False) + "\n")
            out.flush()
            bar.update(1)
    return True


def predict(args, rep):
    """Runs every (policy, budget); returns (datasets loaded, whether every run finished)."""
    datasets = load_datasets(args, rep)
    ok = True
    for policy, budget in runs.plan_runs(args.policies, args.budgets):
        ok = predict_run(args, policy, budget, datasets, rep) and ok
    return datasets, ok
