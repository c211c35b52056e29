"""Answer metrics beyond answer match: exact match, token F1 (SQuAD) and ROUGE-L (LCS F-measure).

All normalise both sides as ``answer_match.normalize_answer`` does (SQuAD normalisation) and take the best
score over the gold answers. The definitions follow the SQuAD evaluation script and Lin (2004) ROUGE-L with
beta = 1. Haystack's ``AnswerExactMatchEvaluator`` and ragas' ``RougeScore`` compare raw strings against one gold
answer; ``external_metrics`` runs them on normalised text (the report takes exact match from Haystack and adds
ragas' stemmed ROUGE-L), and these functions are the fallback and the cross-check (tests/test_compare_report.py).
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from icr2_components.evaluation.answer_match import answer_match
from icr2_components.text.normalization import normalize_answer


def _tokens(text: str) -> list[str]:
    return normalize_answer(text).split()


def exact_match(prediction: str, ground_truths: Iterable[str]) -> bool:
    """True when the normalised prediction equals a normalised non-empty gold answer."""
    normalized = normalize_answer(prediction)
    return any(normalize_answer(str(t)) and normalized == normalize_answer(str(t)) for t in ground_truths)


def _f1(prediction_tokens: list[str], truth_tokens: list[str]) -> float:
    common = Counter(prediction_tokens) & Counter(truth_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(prediction_tokens)
    recall = overlap / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, ground_truths: Iterable[str]) -> float:
    """SQuAD token F1 of the prediction against the best-matching gold answer (0 without gold answers)."""
    prediction_tokens = _tokens(prediction)
    scores = [_f1(prediction_tokens, _tokens(str(t))) for t in ground_truths if _tokens(str(t))]
    return max(scores, default=0.0)


def lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence of two token lists (O(len(a) * len(b)) time, O(len(b)) memory)."""
    if not a or not b:
        return 0
    previous = [0] * (len(b) + 1)
    for token in a:
        current = [0]
        for j, other in enumerate(b, start=1):
            current.append(previous[j - 1] + 1 if token == other else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def rouge_l(prediction: str, ground_truths: Iterable[str]) -> float:
    """ROUGE-L F-measure (beta = 1) on normalised tokens, best over the gold answers."""
    prediction_tokens = _tokens(prediction)
    best = 0.0
    for truth in ground_truths:
        truth_tokens = _tokens(str(truth))
        lcs = lcs_length(prediction_tokens, truth_tokens)
        if lcs:
            precision, recall = lcs / len(prediction_tokens), lcs / len(truth_tokens)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def answer_scores(prediction: str, ground_truths: list[str]) -> dict[str, float]:
    """All answer metrics of one prediction: ``exact_match``, ``answer_match``, ``token_f1``, ``rouge_l``."""
    return {
        "exact_match": float(exact_match(prediction, ground_truths)),
        "answer_match": float(answer_match(prediction, ground_truths)),
        "token_f1": token_f1(prediction, ground_truths),
        "rouge_l": rouge_l(prediction, ground_truths),
    }


def in_context_recall(shown_ids: Iterable[str], gold_ids: Iterable[str]) -> float | None:
    """Share of the gold passages that the pipeline put in the prompt; None when there is no gold passage."""
    gold = set(gold_ids)
    if not gold:
        return None
    return len(gold & set(shown_ids)) / len(gold)
