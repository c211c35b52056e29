"""Answer match: Lost in the Middle's ``best_subspan_em``, the containment score RetrievalQA and Self-RAG use too.

A prediction is correct when a gold answer, normalised the official SQuAD/KILT way
(:func:`icr2_components.text.normalization.normalize_answer`), is a substring of the normalised prediction: so
"It is the Eiffel Tower." matches "eiffel tower". Lenient on purpose, since readers pad their answers, and a plain
substring test, so "10" is found in "1000" (as in the official code).

Gold answers follow KILT's ``get_gold_answers``: answers that are empty after ``strip()`` are dropped. One
deliberate deviation from the official code: a gold answer that normalises to the empty string (say "The" or
"!!") is dropped too, where ``best_subspan_em`` would find "" in every prediction and score 1.0 (and SQuAD's EM
would match any prediction that normalises to ""). No NaturalQuestions-Open answer in the bundled sample
normalises to empty (tests/test_official_metrics.py checks), so on that data the scores are the official ones.
A question without a usable gold answer scores 0 (the official scripts would fail on ``max([])``).
"""

from __future__ import annotations

from collections.abc import Iterable

from icr2_components.text.normalization import normalize_answer


def normalized_gold_answers(ground_truths: Iterable[str], fold_accents: bool = False) -> list[str]:
    """The gold answers as scorers see them: normalised, empty ones dropped (see the module docstring)."""
    result = []
    for truth in ground_truths:
        normalized = normalize_answer(str(truth), fold_accents=fold_accents)
        if normalized:
            result.append(normalized)
    return result


def answer_match(prediction: str, ground_truths: Iterable[str], fold_accents: bool = False) -> bool:
    """Lost in the Middle's ``best_subspan_em``: a normalised gold answer is a substring of the normalised prediction.

    ``answer_match("It was Wilhelm Röntgen.", ["Röntgen"]) -> True``; ``fold_accents=True`` also matches "Rontgen".
    """
    normalized_prediction = normalize_answer(prediction, fold_accents=fold_accents)
    return any(gold in normalized_prediction for gold in normalized_gold_answers(ground_truths, fold_accents))
