"""Answer metrics beyond answer match: exact match and token F1 (the official SQuAD v1.1 / KILT definitions), and
ROUGE-L (LCS F-measure).

Exact match and token F1 are those of SQuAD v1.1's ``evaluate-v1.1.py`` and KILT's ``kilt/eval_downstream.py``:
both sides normalised by the official ``normalize_answer``
(:func:`icr2_components.text.normalization.normalize_answer`: punctuation removed, accents kept), the best score
over the gold answers. Token F1 counts common tokens with multiplicity (``Counter`` intersection) and is 0 when
no token is shared, so an empty prediction scores 0. Gold answers are filtered as in
:mod:`icr2_components.evaluation.metrics.answer_match` (an answer empty after ``strip()`` is dropped, as KILT does; one
that normalises to the empty string is dropped too, a deliberate deviation; a question with no usable gold
answer scores 0 instead of failing). Every function takes ``fold_accents`` (default False, as the official
scripts): True also strips accents, so "Rontgen" equals "Röntgen".

In the compare report, ``answer_scores`` reports exact match on :func:`short_answer` of the reply (the answer
span a user would read, since chat readers answer in sentences), answer match (Lost in the Middle's
``best_subspan_em``), token F1 and ROUGE-L on the whole reply. ROUGE-L (Lin 2004, beta = 1) here is computed on
the officially normalised tokens; KILT's own ROUGE-L uses the ``rouge`` package on raw text. Haystack's
``AnswerExactMatchEvaluator`` and ragas' ``RougeScore`` compare raw strings against one gold answer;
``external_metrics`` feeds them the same normalised text (the report takes exact match from Haystack and adds
ragas' stemmed ROUGE-L), and these functions are the fallback and the cross-check (tests/test_compare_report.py,
tests/test_official_metrics.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from icr2_components.evaluation.metrics.answer_match import answer_match, normalized_gold_answers
from icr2_components.evaluation.metrics.short_answer import short_answer
from icr2_components.text.normalization import normalize_answer


def exact_match(prediction: str, ground_truths: Iterable[str], fold_accents: bool = False) -> bool:
    """Official EM: the normalised prediction equals a normalised gold answer (``"The Eiffel Tower." = "eiffel
    tower"``; ``"The U.S.A." != "U.S."``). The prediction is compared whole; see :func:`short_answer_exact_match`."""
    normalized = normalize_answer(prediction, fold_accents=fold_accents)
    return any(normalized == gold for gold in normalized_gold_answers(ground_truths, fold_accents))


def short_answer_exact_match(prediction: str, ground_truths: Iterable[str], fold_accents: bool = False) -> bool:
    """Official EM on the reply's answer span, ``exact_match(short_answer(prediction), ...)``: the report's EM."""
    return exact_match(short_answer(prediction), ground_truths, fold_accents=fold_accents)


def _f1(prediction_tokens: list[str], truth_tokens: list[str]) -> float:
    common = Counter(prediction_tokens) & Counter(truth_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(prediction_tokens)
    recall = overlap / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, ground_truths: Iterable[str], fold_accents: bool = False) -> float:
    """Official SQuAD/KILT token F1 against the best-matching gold answer (0 without a usable gold answer)."""
    prediction_tokens = normalize_answer(prediction, fold_accents=fold_accents).split()
    return max((_f1(prediction_tokens, gold.split()) for gold in normalized_gold_answers(ground_truths, fold_accents)),
               default=0.0)


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


def rouge_l(prediction: str, ground_truths: Iterable[str], fold_accents: bool = False) -> float:
    """ROUGE-L F-measure (beta = 1) on officially normalised tokens, best over the gold answers."""
    prediction_tokens = normalize_answer(prediction, fold_accents=fold_accents).split()
    best = 0.0
    for gold in normalized_gold_answers(ground_truths, fold_accents):
        truth_tokens = gold.split()
        lcs = lcs_length(prediction_tokens, truth_tokens)
        if lcs:
            precision, recall = lcs / len(prediction_tokens), lcs / len(truth_tokens)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def answer_scores(prediction: str, ground_truths: list[str], fold_accents: bool = False) -> dict[str, float]:
    """All answer metrics of one reply: ``exact_match`` (official EM on :func:`short_answer` of the reply),
    ``answer_match`` (``best_subspan_em``), ``token_f1`` (official) and ``rouge_l``, the last three on the whole
    reply."""
    return {
        "exact_match": float(short_answer_exact_match(prediction, ground_truths, fold_accents)),
        "answer_match": float(answer_match(prediction, ground_truths, fold_accents)),
        "token_f1": token_f1(prediction, ground_truths, fold_accents),
        "rouge_l": rouge_l(prediction, ground_truths, fold_accents),
    }


def in_context_recall(shown_ids: Iterable[str], gold_ids: Iterable[str]) -> float | None:
    """Share of the gold passages that the pipeline put in the prompt; None when there is no gold passage."""
    gold = set(gold_ids)
    if not gold:
        return None
    return len(gold & set(shown_ids)) / len(gold)
