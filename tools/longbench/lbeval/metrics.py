"""LongBench's metrics, written to behave exactly as the official LongBench scorer.

Every function takes (prediction, ground_truth, all_classes) and returns a float in [0, 1]; the
scorer (score.py) takes the maximum over a record's reference answers. The libraries are the
official scorer's own (rouge, jieba, fuzzywuzzy), so that the numbers match.
"""
import difflib
import re
import string
import warnings
from collections import Counter

import jieba
from rouge import Rouge

with warnings.catch_warnings():
    # fuzzywuzzy warns when python-Levenshtein is absent; its difflib fallback is what we want.
    warnings.simplefilter("ignore")
    from fuzzywuzzy import fuzz

jieba.setLogLevel(60)  # no "Building prefix dict" chatter on stderr

ZH_PUNCTUATION = (
    "！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏."
)
_EN_PUNCT = frozenset(string.punctuation)
_ZH_PUNCT = frozenset(string.punctuation + ZH_PUNCTUATION)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_DIGITS = re.compile(r"\d+")


def fuzz_uses_difflib():
    """True when fuzzywuzzy computes its ratio with difflib, as in the official environment."""
    return fuzz.SequenceMatcher is difflib.SequenceMatcher


def normalize_answer(s):
    """English: lower case, punctuation removed, then articles, then runs of whitespace."""
    s = "".join(ch for ch in s.lower() if ch not in _EN_PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def normalize_zh_answer(s):
    """Chinese: lower case, English and Chinese punctuation removed, all whitespace removed."""
    s = "".join(ch for ch in s.lower() if ch not in _ZH_PUNCT)
    return "".join(s.split())


def f1_score(prediction_tokens, ground_truth_tokens):
    """Token-multiset F1."""
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(prediction_tokens)
    recall = same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def qa_f1_score(prediction, ground_truth, all_classes=None):
    return f1_score(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def _zh_tokens(text):
    tokens = (normalize_zh_answer(t) for t in jieba.cut(text, cut_all=False))
    return [t for t in tokens if t]


def qa_f1_zh_score(prediction, ground_truth, all_classes=None):
    return f1_score(_zh_tokens(prediction), _zh_tokens(ground_truth))


def rouge_score(prediction, ground_truth, all_classes=None):
    """Rouge-L F of the rouge package; 0 when it cannot score (an empty text, say), as the official."""
    try:
        scores = Rouge().get_scores([prediction], [ground_truth], avg=True)
    except Exception:  # the official scorer catches everything here
        return 0.0
    return scores["rouge-l"]["f"]


def rouge_zh_score(prediction, ground_truth, all_classes=None):
    def words(text):
        return " ".join(jieba.cut(text, cut_all=False))

    return rouge_score(words(prediction), words(ground_truth))


def classification_score(prediction, ground_truth, all_classes=None):
    """The share of the class names found in the prediction that is the right class.

    Class names found inside the prediction are candidates; a candidate that is a proper substring
    of the ground truth is dropped. The official scorer drops them from the list while iterating
    over it, so the candidate right after each dropped one escapes the check; kept here, since it
    changes scores. Its fallback to difflib similarity when no class is found never runs (its
    condition compares the list with 0), so a prediction naming no class scores 0.
    """
    matches = [c for c in (all_classes or []) if c in prediction]
    i = 0
    while i < len(matches):
        m = matches[i]
        if m in ground_truth and m != ground_truth:
            matches.remove(m)  # the first equal element, as list.remove
        i += 1  # advances even after a removal: the next candidate is skipped
    return 1.0 / len(matches) if ground_truth in matches else 0.0


def _digit_share(prediction, wanted):
    numbers = _DIGITS.findall(prediction)
    if not numbers:
        return 0.0
    return sum(1 for n in numbers if n == wanted) / len(numbers)


def count_score(prediction, ground_truth, all_classes=None):
    """The share of the digit runs in the prediction that equal the count."""
    return _digit_share(prediction, str(ground_truth))


def _paragraph_id(ground_truth, pattern):
    m = re.search(pattern, ground_truth)
    if m is None:
        raise ValueError(f"the answer {ground_truth!r} names no paragraph (expected {pattern!r})")
    return m.group(1)


def retrieval_score(prediction, ground_truth, all_classes=None):
    """The share of the digit runs in the prediction that equal the paragraph number of the answer."""
    return _digit_share(prediction, _paragraph_id(ground_truth, r"Paragraph (\d+)"))


def retrieval_zh_score(prediction, ground_truth, all_classes=None):
    return _digit_share(prediction, _paragraph_id(ground_truth, r"段落(\d+)"))


def code_sim_score(prediction, ground_truth, all_classes=None):
    """fuzz.ratio of the first line that is not a comment or fence ('`', '#', '//') and the answer."""
    line = ""
    for candidate in prediction.lstrip("\n").split("\n"):
        if "`" not in candidate and "#" not in candidate and "//" not in candidate:
            line = candidate
            break
    return fuzz.ratio(line, ground_truth) / 100


def first_line(prediction):
    """The first-line rule of trec, triviaqa, samsum and lsht: leading newlines dropped, first line kept."""
    return prediction.lstrip("\n").split("\n")[0]
