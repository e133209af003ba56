"""The results as a markdown table in the layout of SLAKE's Table 1: one row per (policy, budget),
the full cache first, then the budgets in increasing order; one column per dataset in the papers'
order, then the average."""
from . import protocol

CATEGORIES = [
    ("Single-Doc QA", ["narrativeqa", "qasper", "multifieldqa_en", "multifieldqa_zh"]),
    ("Multi-Doc QA", ["hotpotqa", "2wikimqa", "musique", "dureader"]),
    ("Summarization", ["gov_report", "qmsum", "multi_news", "vcsum"]),
    ("Few-shot Learning", ["trec", "triviaqa", "samsum", "lsht"]),
    ("Synthetic", ["passage_count", "passage_retrieval_en", "passage_retrieval_zh"]),
    ("Code", ["lcc", "repobench-p"]),
]


def ordered_datasets(datasets):
    """The papers' column order; datasets it does not know go last, as given."""
    known = [d for _, ds in CATEGORIES for d in ds]
    return [d for d in known if d in datasets] + [d for d in datasets if d not in known]


def row_order(rows, policies):
    """Full cache first, then by budget, then in the order the policies were given."""
    rank = {p: i for i, p in enumerate(policies)}
    return sorted(rows, key=lambda r: (r["policy"] != "full", r["budget"], rank.get(r["policy"], len(rank)), r["policy"]))


def average(values):
    present = [v for v in values if v is not None]
    return round(sum(present) / len(present), 2) if present else None


def cell(v):
    return "—" if v is None else f"{v:.2f}"


def markdown(rows, datasets, policies, bucket=None, title=None):
    """rows: dicts with policy, budget and scores ({dataset: score}, or {dataset: {bucket: score}}
    for LongBench-E with `bucket` naming the bucket shown)."""
    cols = ordered_datasets(datasets)
    lines = []
    if title:
        lines += [title, ""]
    if not cols:
        return "\n".join(lines + ["No dataset has a score."]) + "\n"
    groups = [f"{name}: {', '.join(protocol.SHORT_NAME.get(d, d) for d in ds if d in cols)}"
              for name, ds in CATEGORIES if any(d in cols for d in ds)]
    lines += ["Columns: " + "; ".join(groups) + ".", ""]
    lines.append("| Method | C | " + " | ".join(protocol.SHORT_NAME.get(d, d) for d in cols) + " | Avg. |")
    lines.append("|---|---:|" + "---:|" * (len(cols) + 1))
    partial = False
    for r in row_order(rows, policies):
        values = []
        for d in cols:
            v = r["scores"].get(d)
            if bucket is not None and isinstance(v, dict):
                v = v.get(bucket)
            values.append(v if isinstance(v, (int, float)) else None)
        avg = average(values)
        mark = ""
        if avg is not None and any(v is None for v in values):
            mark, partial = "*", True
        budget = "—" if r["policy"] == "full" else str(r["budget"])
        lines.append(f"| {r['policy']} | {budget} | " + " | ".join(cell(v) for v in values) +
                     f" | {cell(avg)}{mark} |")
    if partial:
        lines += ["", "\\* average over the datasets that have a score in that row."]
    return "\n".join(lines) + "\n"
