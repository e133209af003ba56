"""Reading LongBench's config files and data files, with a message naming the file (and line,
and _id) for everything that cannot be used."""
import json
import os
import string


class FatalError(Exception):
    """A problem that stops the whole command (a config file missing or unreadable, ...)."""


def load_config(config_dir):
    """dataset2prompt.json and dataset2maxlen.json of a LongBench checkout's config directory."""
    out = []
    for name in ("dataset2prompt.json", "dataset2maxlen.json"):
        path = os.path.join(config_dir, name)
        try:
            with open(path, encoding="utf-8") as f:
                value = json.load(f)
        except FileNotFoundError:
            raise FatalError(f"{path}: no such file (the LongBench config directory needs {name})") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise FatalError(f"{path}: cannot read it: {e}") from None
        if not isinstance(value, dict):
            raise FatalError(f"{path}: expected a JSON object of dataset names")
        out.append(value)
    return out[0], out[1]


def check_dataset_config(dataset, prompts, maxlens, config_dir):
    """The template and max_new_tokens of a dataset; ValueError with a message when unusable."""
    if dataset not in prompts:
        raise ValueError(f"{os.path.join(config_dir, 'dataset2prompt.json')}: no prompt template for '{dataset}'")
    if dataset not in maxlens:
        raise ValueError(f"{os.path.join(config_dir, 'dataset2maxlen.json')}: no max length for '{dataset}'")
    template, maxlen = prompts[dataset], maxlens[dataset]
    where = os.path.join(config_dir, "dataset2prompt.json")
    if not isinstance(template, str):
        raise ValueError(f"{where}: the template of '{dataset}' is not a string")
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise ValueError(f"{where}: the template of '{dataset}' is malformed: {e}") from None
    if isinstance(maxlen, bool) or not isinstance(maxlen, int) or maxlen < 1:
        raise ValueError(f"{os.path.join(config_dir, 'dataset2maxlen.json')}: the max length of '{dataset}' "
                         f"must be a positive integer, got {maxlen!r}")
    return template, maxlen, fields


def data_path(data_dir, dataset, longbench_e):
    return os.path.join(data_dir, f"{dataset}_e.jsonl" if longbench_e else f"{dataset}.jsonl")


def _is_str_list(v):
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _lone_surrogate(v):
    """JSON may escape half of a UTF-16 pair (\\ud800); such text cannot be written as UTF-8."""
    strings = [v] if isinstance(v, str) else v if isinstance(v, list) else []
    for s in strings:
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return True
    return False


def check_record(rec, dataset, fields, longbench_e):
    """Why a record cannot be used, or None."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    rid = rec.get("_id")
    if not isinstance(rid, str) or not rid:
        return "no \"_id\" (a non-empty string)"
    for f in fields:
        if f not in rec:
            return f"missing field \"{f}\", which the prompt template needs"
        if not isinstance(rec[f], str):
            return f"field \"{f}\" is not a string"
    answers = rec.get("answers")
    if not _is_str_list(answers) or not answers:
        return "\"answers\" must be a non-empty list of strings"
    classes = rec.get("all_classes")
    if dataset in ("trec", "lsht"):
        if not _is_str_list(classes) or not classes:
            return "\"all_classes\" must be a non-empty list of strings for a classification dataset"
    elif classes is not None and not _is_str_list(classes):
        return "\"all_classes\" must be null or a list of strings"
    for f in list(fields) + ["answers", "all_classes"]:
        if _lone_surrogate(rec.get(f)):
            return f"field \"{f}\" is not valid Unicode (a lone UTF-16 surrogate)"
    length = rec.get("length")
    if longbench_e or length is not None:
        if isinstance(length, bool) or not isinstance(length, (int, float)):
            return "\"length\" must be a number" + (" (LongBench-E buckets by it)" if longbench_e else "")
    return None


def load_records(path, dataset, fields, longbench_e, warn):
    """The usable records of a data file, in file order; every unusable line goes to warn() with
    its file, line and _id. Raises FileNotFoundError / OSError for a file that cannot be read."""
    records, seen = [], set()
    with open(path, encoding="utf-8-sig", errors="strict") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                warn(f"{where}: not valid JSON ({e.msg} at column {e.colno}); record skipped")
                continue
            problem = check_record(rec, dataset, fields, longbench_e)
            rid = rec.get("_id") if isinstance(rec, dict) else None
            if isinstance(rid, str) and rid:
                where += f" (_id {rid})"
            if problem:
                warn(f"{where}: {problem}; record skipped")
                continue
            if rid in seen:
                warn(f"{where}: the same _id as an earlier record; record skipped")
                continue
            seen.add(rid)
            records.append(rec)
    return records


def select(records, limit, shard):
    """The first `limit` records (0: all), then every n-th from the i-th for shard (i, n)."""
    if limit:
        records = records[:limit]
    i, n = shard
    return records[i::n]
