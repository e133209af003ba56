"""The official LongBench v1 generation protocol: datasets, metrics, which prompts skip the chat
template, the first-line rule, stop rules and the per-model maximum prompt length."""
import os
import re

from . import metrics

# The 16 English datasets of SLAKE's and CAKE's tables, in their column order (grouped as
# single-document QA, multi-document QA, summarisation, few-shot, synthetic, code).
ENGLISH = [
    "narrativeqa", "qasper", "multifieldqa_en",
    "hotpotqa", "2wikimqa", "musique",
    "gov_report", "qmsum", "multi_news",
    "trec", "triviaqa", "samsum",
    "passage_count", "passage_retrieval_en",
    "lcc", "repobench-p",
]
# The datasets that LongBench-E has ({dataset}_e.jsonl).
LONGBENCH_E = [
    "qasper", "multifieldqa_en", "hotpotqa", "2wikimqa", "gov_report", "multi_news",
    "trec", "triviaqa", "samsum", "passage_count", "passage_retrieval_en", "lcc", "repobench-p",
]

METRIC = {
    "narrativeqa": metrics.qa_f1_score,
    "qasper": metrics.qa_f1_score,
    "multifieldqa_en": metrics.qa_f1_score,
    "multifieldqa_zh": metrics.qa_f1_zh_score,
    "hotpotqa": metrics.qa_f1_score,
    "2wikimqa": metrics.qa_f1_score,
    "musique": metrics.qa_f1_score,
    "dureader": metrics.rouge_zh_score,
    "gov_report": metrics.rouge_score,
    "qmsum": metrics.rouge_score,
    "multi_news": metrics.rouge_score,
    "vcsum": metrics.rouge_zh_score,
    "trec": metrics.classification_score,
    "triviaqa": metrics.qa_f1_score,
    "samsum": metrics.rouge_score,
    "lsht": metrics.classification_score,
    "passage_retrieval_en": metrics.retrieval_score,
    "passage_count": metrics.count_score,
    "passage_retrieval_zh": metrics.retrieval_zh_score,
    "lcc": metrics.code_sim_score,
    "repobench-p": metrics.code_sim_score,
}

# Few-shot and code prompts go to the model as they are, without the chat template.
NO_CHAT = frozenset(["trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p"])
# The scorer keeps only the first line of these predictions.
FIRST_LINE = frozenset(["trec", "triviaqa", "samsum", "lsht"])
# Classification datasets: their records need all_classes.
CLASSIFICATION = frozenset(["trec", "lsht"])

# Short column names, as in the papers' tables.
SHORT_NAME = {
    "narrativeqa": "NrtvQA", "qasper": "Qasper", "multifieldqa_en": "MF-en", "multifieldqa_zh": "MF-zh",
    "hotpotqa": "HotpotQA", "2wikimqa": "2WikiMQA", "musique": "Musique", "dureader": "DuReader",
    "gov_report": "GovReport", "qmsum": "QMSum", "multi_news": "MultiNews", "vcsum": "VCSum",
    "trec": "TREC", "triviaqa": "TriviaQA", "samsum": "SAMSum", "lsht": "LSHT",
    "passage_count": "PCount", "passage_retrieval_en": "PRe", "passage_retrieval_zh": "PRe-zh",
    "lcc": "Lcc", "repobench-p": "RB-P",
}

# The maximum prompt length in tokens, per model family (the context minus room for the reply).
MAX_LENGTH = {"llama3.1": 127500, "mistral": 31500, "llama2": 3500}
_FAMILY_PATTERNS = [
    ("llama3.1", re.compile(r"llama[-_ ]?3[._-]1")),
    ("mistral", re.compile(r"mistral")),
    ("llama2", re.compile(r"llama[-_ ]?2")),
]


def guess_family(model_path):
    """The family named by the model's file or directory name, or None."""
    name = os.path.basename(os.path.normpath(model_path)).lower()
    for family, pattern in _FAMILY_PATTERNS:
        if pattern.search(name):
            return family
    return None


def build_request(dataset, record, template, max_new_tokens, max_length, chat_model=True):
    """The engine request for one record (tools/cli/batch_request.h).

    The prompt is the dataset's template filled with the record's fields; the engine truncates it in
    the middle to max_length tokens and then applies the chat template unless the dataset is one
    that skips it. samsum stops at a newline and generates at least one token, as the official
    generate() call (eos_token_id with the newline token, min_length one past the prompt).
    """
    request = {
        "id": record["_id"],
        "prompt": template.format(**record),
        "max_new_tokens": max_new_tokens,
        "chat": chat_model and dataset not in NO_CHAT,
        "truncate_tokens": max_length,
    }
    if dataset == "samsum":
        request["stop"] = ["\n"]
        request["min_new_tokens"] = 1
    return request
