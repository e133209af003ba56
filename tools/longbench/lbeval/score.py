"""The score step, as the official LongBench scorer: per record the first-line rule where it
applies, then the best score over the reference answers; per dataset the mean x 100 rounded to two
decimals (LongBench-E: the same per length bucket 0-4k, 4-8k, 8k+)."""
import json
import os

import numpy as np

from . import protocol, runs

BUCKETS = ("0-4k", "4-8k", "8k+")


def score_record(dataset, pred):
    prediction = pred["pred"]
    if dataset in protocol.FIRST_LINE:
        prediction = protocol.metrics.first_line(prediction)
    metric = protocol.METRIC[dataset]
    best = 0.0
    for answer in pred["answers"]:
        best = max(best, metric(prediction, answer, all_classes=pred.get("all_classes")))
    return best


def bucket(length):
    if length < 4000:
        return "0-4k"
    if length < 8000:
        return "4-8k"
    return "8k+"


def aggregate(scores):
    """Mean x 100, two decimals, summed in record order as the official scorer."""
    total = 0.0
    for s in scores:
        total += s
    return round(100 * total / len(scores), 2)


def aggregate_e(scores_lengths):
    """Per bucket: np.mean x 100, two decimals; None for an empty bucket (the official gives NaN)."""
    per = {b: [] for b in BUCKETS}
    for s, length in scores_lengths:
        per[bucket(length)].append(s)
    return {b: (round(100 * np.mean(v), 2) if v else None) for b, v in per.items()}


def _usable(pred, dataset, longbench_e):
    answers = pred.get("answers")
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        return "\"answers\" is not a non-empty list of strings"
    classes = pred.get("all_classes")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        return "\"all_classes\" is not null or a list of strings"
    length = pred.get("length")
    if longbench_e and (isinstance(length, bool) or not isinstance(length, (int, float))):
        return "no numeric \"length\" for LongBench-E"
    return None


def score_dataset(run_dir, dataset, longbench_e, expected_ids, warn):
    """The dataset's score in this run, or None when it has no predictions. expected_ids (the
    selected records, in data order) orders the records and reports the missing ones."""
    name = os.path.basename(run_dir)
    paths = runs.pred_paths(run_dir, dataset, longbench_e)
    preds = runs.read_predictions(paths, warn)
    if expected_ids is not None:
        expected_set = set(expected_ids)
        missing = [i for i in expected_ids if i not in preds]
        extra = [i for i in preds if i not in expected_set]
        if missing:
            warn(f"{name} {dataset}: {len(missing)} of {len(expected_ids)} records have no prediction "
                 f"(first: _id {missing[0]}); scored on the {len(expected_ids) - len(missing)} there are")
        ordered = [preds[i] for i in expected_ids if i in preds] + [preds[i] for i in extra]
    else:
        ordered = list(preds.values())
    if not ordered:
        return None
    if dataset not in protocol.METRIC:
        warn(f"{name} {dataset}: no metric for this dataset; not scored")
        return None
    scored = []
    for pred in ordered:
        problem = _usable(pred, dataset, longbench_e)
        if problem is None:
            try:
                scored.append((score_record(dataset, pred), pred.get("length")))
                continue
            except ValueError as e:
                problem = str(e)
        warn(f"{name} {dataset} _id {pred['_id']}: cannot score it: {problem}; left out")
    if not scored:
        return None
    if longbench_e:
        return aggregate_e(scored)
    return aggregate([s for s, _ in scored])


def score_run(run_dir, datasets, longbench_e, expected, warn):
    """{dataset: score} for the datasets with predictions; written to result.json (result_e.json)."""
    result = {}
    for ds in datasets:
        s = score_dataset(run_dir, ds, longbench_e, expected.get(ds) if expected is not None else None, warn)
        if s is not None:
            result[ds] = s
    path = os.path.join(run_dir, "result_e.json" if longbench_e else "result.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=4)
        f.write("\n")
    return result
