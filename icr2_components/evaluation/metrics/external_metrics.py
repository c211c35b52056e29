"""Answer metrics computed by Haystack's evaluator and Google's rouge-score, beside our own.

The compare report takes ``exact_match`` from Haystack's ``AnswerExactMatchEvaluator`` and adds
``rouge_l_ragas``, ragas' ``RougeScore`` definition of ROUGE-L (F-measure), next to our ``rouge_l``. ragas'
``RougeScore(rouge_type="rougeL", mode="fmeasure")`` is ``rouge_score.rouge_scorer.RougeScorer(["rougeL"],
use_stemmer=True).score(reference, response).fmeasure``; that call is made here directly, so the figures are ragas'
without installing ragas and its LangChain dependencies (the column keeps its name). Both compare raw strings
with one reference, so both are fed text normalised the official SQuAD/KILT way
(``text.normalization.normalize_answer``: punctuation removed, articles dropped, accents kept) with the gold
answers filtered as ``answer_match.normalized_gold_answers`` does, and keep the best score over the gold
answers. Haystack's exact match is given the reply's answer span (``short_answer.short_answer``), as the report's
``exact_match`` is defined, so it equals ``text_metrics.short_answer_exact_match`` by construction; the stemmed
ROUGE-L gets the whole reply and differs from our ``rouge_l`` only by its Porter stemming ("towers" = "tower")
and its ASCII-only tokenizer.

Each function returns None when its library cannot be imported (rouge-score comes with the ``eval`` extra), and
``implementations`` says which code produced each metric and why a fallback was used.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from icr2_components.evaluation.metrics.answer_match import normalized_gold_answers
from icr2_components.evaluation.metrics.short_answer import short_answer
from icr2_components.text.normalization import normalize_answer

OURS = {
    "exact_match": (
        "icr2_components.evaluation.metrics.text_metrics.short_answer_exact_match (official SQuAD v1.1/KILT "
        "exact match on the reply's answer span, evaluation.metrics.short_answer; best over gold answers)"
    ),
    "answer_match": (
        "icr2_components.evaluation.metrics.answer_match.answer_match (Lost in the Middle's best_subspan_em: "
        "officially normalised gold answer contained in the normalised reply)"
    ),
    "token_f1": (
        "icr2_components.evaluation.metrics.text_metrics.token_f1 (official SQuAD v1.1/KILT token F1 on the whole "
        "reply, best over gold answers)"
    ),
    "rouge_l": (
        "icr2_components.evaluation.metrics.text_metrics.rouge_l (LCS F-measure on officially normalised tokens "
        "of the whole reply, no stemming)"
    ),
}
HAYSTACK_EXACT_MATCH = (
    "haystack.components.evaluators.AnswerExactMatchEvaluator on the reply's answer span "
    "(evaluation.metrics.short_answer), both sides normalised the official SQuAD v1.1/KILT way, best "
    "over gold answers"
)
RAGAS_ROUGE_L = ("rouge_score.rouge_scorer.RougeScorer(['rougeL'], use_stemmer=True) F-measure, what ragas' "
                 "RougeScore(rouge_type='rougeL', mode='fmeasure') computes, on the whole reply, both sides "
                 "normalised the official SQuAD v1.1/KILT way, best over gold answers (Porter stemming)")


def _pairs(predictions: Sequence[str], gold_lists: Sequence[Sequence[str]]) -> tuple[list[str], list[str], list[int]]:
    """Flatten to (normalised gold, normalised prediction) pairs, with the answer index of each pair."""
    golds, predicted, owner = [], [], []
    for index, (prediction, answers) in enumerate(zip(predictions, gold_lists, strict=True)):
        normalized = normalize_answer(prediction)
        for gold in normalized_gold_answers(answers):  # empty gold answers dropped, as in text_metrics
            golds.append(gold)
            predicted.append(normalized)
            owner.append(index)
    return golds, predicted, owner


def _best_per_answer(scores: Sequence[float], owner: Sequence[int], count: int) -> list[float]:
    best = [0.0] * count
    for score, index in zip(scores, owner, strict=True):
        best[index] = max(best[index], float(score))
    return best


@functools.lru_cache(maxsize=1)
def rouge_score_import_error() -> str | None:
    """None when rouge-score can run here, else why not (the import error, once per process)."""
    try:
        from rouge_score import rouge_scorer  # noqa: F401
    except ImportError as error:
        return f"{type(error).__name__}: {error} (the 'eval' extra installs it)"
    return None


def haystack_exact_match(predictions: Sequence[str], gold_lists: Sequence[Sequence[str]]) -> list[float] | None:
    """Exact match per prediction by Haystack's ``AnswerExactMatchEvaluator`` on officially normalised text, the
    predictions compared whole (= ``text_metrics.exact_match``); None if Haystack cannot be imported."""
    try:
        from haystack.components.evaluators import AnswerExactMatchEvaluator
    except ImportError:
        return None
    golds, predicted, owner = _pairs(predictions, gold_lists)
    if not golds:
        return [0.0] * len(predictions)
    scores = AnswerExactMatchEvaluator().run(ground_truth_answers=golds, predicted_answers=predicted)
    return _best_per_answer(scores["individual_scores"], owner, len(predictions))


def stemmed_rouge_l(predictions: Sequence[str], gold_lists: Sequence[Sequence[str]]) -> list[float] | None:
    """ROUGE-L F-measure per answer as ragas' ``RougeScore`` defines it (rouge-score with Porter stemming); None
    when rouge-score cannot be imported."""
    if rouge_score_import_error() is not None:
        return None
    from rouge_score import rouge_scorer

    golds, predicted, owner = _pairs(predictions, gold_lists)
    if not golds:
        return [0.0] * len(predictions)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    scores = [scorer.score(g, p)["rougeL"].fmeasure for g, p in zip(golds, predicted, strict=True)]
    return _best_per_answer(scores, owner, len(predictions))


def external_scores(records: Sequence[dict]) -> tuple[list[dict[str, float]], dict[str, str]]:
    """Per record ``{"exact_match", "rouge_l_ragas"?}`` from the external evaluators, and the implementation map.

    A metric whose library is missing is absent from the per-record dicts (the caller keeps its own value for
    ``exact_match``; ``rouge_l_ragas`` is then unknown) and its implementation entry says why.
    """
    predictions = [r["answer"] for r in records]
    gold_lists = [r["answers"] for r in records]
    per_record: list[dict[str, float]] = [{} for _ in records]
    implementations = dict(OURS)
    exact = haystack_exact_match([short_answer(p) for p in predictions], gold_lists)  # EM on the answer span
    if exact is None:
        implementations["exact_match"] += " (Haystack's evaluator could not be imported)"
    else:
        implementations["exact_match"] = HAYSTACK_EXACT_MATCH
        for scores, value in zip(per_record, exact, strict=True):
            scores["exact_match"] = value
    rouge = stemmed_rouge_l(predictions, gold_lists)
    if rouge is None:
        why = rouge_score_import_error()
        implementations["rouge_l_ragas"] = f"not computed: rouge-score cannot be imported ({why})"
    else:
        implementations["rouge_l_ragas"] = RAGAS_ROUGE_L
        for scores, value in zip(per_record, rouge, strict=True):
            scores["rouge_l_ragas"] = value
    return per_record, implementations


__all__ = ["external_scores", "haystack_exact_match", "rouge_score_import_error", "stemmed_rouge_l"]
