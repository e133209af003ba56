"""The metrics and the scorer's rules on cases worked out by hand from the official LongBench
scorer's definitions (the working is in the comments)."""
import unittest

import lbtest  # noqa: F401  (puts tools/longbench on the path)
from lbeval import metrics as m
from lbeval import score


class Normalisation(unittest.TestCase):
    def test_english_lower_punctuation_then_articles_then_spaces(self):
        # lower: "the cat's hat, a-ok!"; punctuation out: "the cats hat aok"; articles (whole words
        # only, after punctuation, so "a-OK" is no article): " cats hat aok"; spaces: "cats hat aok".
        self.assertEqual(m.normalize_answer("The Cat's hat, a-OK!"), "cats hat aok")
        # "an" and "the" inside words stay: "another theme" keeps both words.
        self.assertEqual(m.normalize_answer("An  another\ttheme, THE end"), "another theme end")

    def test_chinese_punctuation_and_all_spaces_removed(self):
        # "，" and "。" are Chinese punctuation, "!" English; every space goes, none is put back.
        self.assertEqual(m.normalize_zh_answer("北京 是，首都。Ok!"), "北京是首都ok")


class QaF1(unittest.TestCase):
    def test_english(self):
        # pred tokens [eiffel, tower, in, paris], truth [paris]: 1 in common, P = 1/4, R = 1,
        # F1 = 2 * (1/4) / (5/4) = 0.4.
        self.assertAlmostEqual(m.qa_f1_score("The Eiffel Tower, in Paris.", "Paris"), 0.4)
        # Multiset: [paris, paris] vs [paris]: 1 in common, P = 1/2, R = 1, F1 = 2/3.
        self.assertAlmostEqual(m.qa_f1_score("Paris paris", "paris"), 2 / 3)
        # Articles and punctuation alone normalise to nothing: 0.
        self.assertEqual(m.qa_f1_score("the a an ...", "Paris"), 0.0)
        self.assertEqual(m.qa_f1_score("The paris!", "PARIS"), 1.0)

    def test_chinese_segmentation(self):
        # jieba (precise mode) cuts 我来到北京清华大学 into 我/来到/北京/清华大学 (jieba's README):
        # 1 word of 4 in common with 清华大学, F1 = 2 * (1/4) / (5/4) = 0.4. By characters it would
        # be 4 of 9 and 4 of 4: F1 = 8/13.
        self.assertAlmostEqual(m.qa_f1_zh_score("我来到北京清华大学", "清华大学"), 0.4)
        # The "！" word normalises to nothing and is dropped: [清华大学] vs [清华大学].
        self.assertEqual(m.qa_f1_zh_score("清华大学！", "清华大学"), 1.0)


class Rouge(unittest.TestCase):
    def test_rouge_l(self):
        # Distinct words; LCS of [the cat sat on a mat] and [the cat lay on a mat] is 5 words,
        # P = R = 5/6, F = 5/6 (the rouge package adds 1e-8 to the denominator).
        self.assertAlmostEqual(m.rouge_score("the cat sat on a mat", "the cat lay on a mat"), 5 / 6, places=6)
        # LCS(a b c d, a c) = 2, P = 2/4, R = 2/2, F = 2 * 0.5 / 1.5 = 2/3.
        self.assertAlmostEqual(m.rouge_score("a b c d", "a c"), 2 / 3, places=6)

    def test_empty_prediction_scores_zero(self):
        # The rouge package raises on an empty hypothesis; the official scorer gives 0.
        self.assertEqual(m.rouge_score("", "a c"), 0.0)
        self.assertEqual(m.rouge_score("...", "a c"), 0.0)  # only sentence separators: empty too

    def test_rouge_zh_on_jieba_words(self):
        # [我 来到 北京 清华大学] vs [我 来到 清华大学]: LCS 3, P = 3/4, R = 1, F = 1.5 / 1.75 = 6/7.
        self.assertAlmostEqual(m.rouge_zh_score("我来到北京清华大学", "我来到清华大学"), 6 / 7, places=6)


class Classification(unittest.TestCase):
    CLASSES = ["Animal", "Location", "Human being"]

    def test_share_of_found_classes(self):
        self.assertEqual(m.classification_score("Type: Human being", "Human being", all_classes=self.CLASSES), 1.0)
        # Two classes named, one right: 1/2.
        self.assertEqual(m.classification_score("Animal or Human being", "Human being", all_classes=self.CLASSES), 0.5)
        self.assertEqual(m.classification_score("Location", "Human being", all_classes=self.CLASSES), 0.0)
        # No class named: 0 (the official fallback to difflib similarity never runs).
        self.assertEqual(m.classification_score("no idea", "Human being", all_classes=self.CLASSES), 0.0)

    def test_class_substrings_of_the_truth_are_dropped(self):
        # "Human" is found but is a proper substring of the truth "Human being": dropped, 1/1.
        self.assertEqual(m.classification_score("Human being", "Human being", all_classes=["Human", "Human being"]), 1.0)

    def test_the_candidate_after_a_dropped_one_escapes_as_in_the_official(self):
        # Found: [Human, Hu, Human being]. "Human" is dropped while iterating, "Hu" slides into its
        # place and the iteration moves on to "Human being": "Hu" stays, 1 right of 2 = 0.5.
        self.assertEqual(
            m.classification_score("Human being", "Human being", all_classes=["Human", "Hu", "Human being"]), 0.5)


class DigitRuns(unittest.TestCase):
    def test_count(self):
        # Runs [3, 13, 3]: "13" is not "3"; 2 of 3 right.
        self.assertAlmostEqual(m.count_score("There are 3 paragraphs, not 13 or 3.", "3"), 2 / 3)
        self.assertEqual(m.count_score("There are three.", "3"), 0.0)

    def test_retrieval(self):
        self.assertEqual(m.retrieval_score("Paragraph 12", "Paragraph 12"), 1.0)
        # Runs [1, 12], the answer's paragraph is 12: 1/2.
        self.assertEqual(m.retrieval_score("Paragraph 1 and Paragraph 12", "Paragraph 12"), 0.5)
        self.assertEqual(m.retrieval_score("Paragraph 2", "Paragraph 12"), 0.0)
        with self.assertRaises(ValueError):
            m.retrieval_score("Paragraph 2", "the second one")

    def test_retrieval_zh(self):
        # Runs [5, 15], the answer's paragraph is 5: 1/2.
        self.assertEqual(m.retrieval_zh_score("答案是段落5，不是段落15", "段落5"), 0.5)


class CodeSimilarity(unittest.TestCase):
    def test_first_line_that_is_not_a_comment_or_fence(self):
        # Leading newlines go; "# comment" and "```python" are skipped; "x = foo(1)" equals the answer.
        self.assertEqual(m.code_sim_score("\n\n# comment\n```python\nx = foo(1)\ny = 2", "x = foo(1)"), 1.0)
        # "// c" is skipped; difflib ratio of "abcd" and "abce": 2 * 3 / 8 = 0.75 -> 75 -> 0.75.
        self.assertEqual(m.code_sim_score("// c\nabcd", "abce"), 0.75)
        # Every line a comment: the empty string, ratio 0.
        self.assertEqual(m.code_sim_score("# a\n// b", "abc"), 0.0)

    def test_fuzzywuzzy_uses_difflib_as_the_official_environment(self):
        self.assertTrue(m.fuzz_uses_difflib(), "python-Levenshtein is installed: fuzz.ratio would differ")


class ScorerRules(unittest.TestCase):
    def test_first_line_rule(self):
        self.assertEqual(m.first_line("\n\nLocation\nmore"), "Location")
        self.assertEqual(m.first_line("  a\nb"), "  a")  # only newlines are stripped
        pred = {"pred": "\nAnimal\nHuman being", "answers": ["Human being"], "all_classes": Classification.CLASSES}
        # trec keeps "Animal" only: 0. Without the rule both classes count: 1/2.
        self.assertEqual(score.score_record("trec", pred), 0.0)
        self.assertEqual(m.classification_score(pred["pred"], "Human being", all_classes=pred["all_classes"]), 0.5)
        # triviaqa: "Paris" on the first line, F1 1; qasper has no such rule: [paris, ..., london].
        pred = {"pred": "Paris\nLondon is big", "answers": ["Paris"]}
        self.assertEqual(score.score_record("triviaqa", pred), 1.0)
        self.assertAlmostEqual(score.score_record("qasper", pred), 2 * (1 / 4) / (5 / 4))

    def test_best_of_the_answers(self):
        pred = {"pred": "Eiffel Tower", "answers": ["Paris", "the Eiffel Tower"]}  # 0 and 1
        self.assertEqual(score.score_record("hotpotqa", pred), 1.0)

    def test_aggregate_x100_two_decimals(self):
        self.assertEqual(score.aggregate([1.0, 0.5, 0.0]), 50.0)
        self.assertEqual(score.aggregate([1.0, 0.0, 0.0]), 33.33)
        self.assertEqual(score.aggregate([2 / 3]), 66.67)

    def test_longbench_e_buckets(self):
        # <4000, 4000..7999, >=8000; an empty bucket has no score.
        r = score.aggregate_e([(1.0, 3999), (0.0, 4000), (1.0, 7999), (0.5, 8000)])
        self.assertEqual(r, {"0-4k": 100.0, "4-8k": 50.0, "8k+": 50.0})
        self.assertEqual(score.aggregate_e([(1.0, 10)]), {"0-4k": 100.0, "4-8k": None, "8k+": None})


if __name__ == "__main__":
    unittest.main()
