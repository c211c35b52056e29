"""Scores of retrieve / don't-retrieve decisions against needs-retrieval labels (RetrievalQA, A.6).

Retrieval accuracy is the share of decisions equal to the label (on a set where every question needs
retrieval it equals the retrieval rate, as in the paper's Table 1). Precision and recall are macro
averages over the two classes and F1 their harmonic mean, as in the paper's Table 10.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class RetrievalDecisionScores:
    """Decision scores over ``count`` questions; label-based fields are None when no label was given."""

    count: int
    retrieval_rate: float
    labelled: int
    retrieval_accuracy: float | None
    precision: float | None
    recall: float | None
    f1: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def _safe_ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def _class_precision_recall(decisions: Sequence[bool], labels: Sequence[bool], positive: bool) -> tuple[float, float]:
    true_positive = sum(1 for d, label in zip(decisions, labels, strict=True) if d == positive and label == positive)
    predicted = sum(1 for d in decisions if d == positive)
    actual = sum(1 for label in labels if label == positive)
    return _safe_ratio(true_positive, predicted), _safe_ratio(true_positive, actual)


def score_retrieval_decisions(
    decisions: Sequence[bool], labels: Sequence[bool | None] | None = None
) -> RetrievalDecisionScores:
    """Score decisions (True = retrieve); questions whose label is None count only in the retrieval rate.

    Macro averaging covers the classes present in the labels, so an all-needs-retrieval set is scored on the
    retrieve class alone rather than being dragged down by an empty no-retrieval class.
    """
    count = len(decisions)
    if labels is not None and len(labels) != count:
        raise ValueError(f"Got {count} decisions but {len(labels)} labels; pass one label (or None) per decision.")
    retrieval_rate = _safe_ratio(sum(1 for d in decisions if d), count)
    pairs = [(d, label) for d, label in zip(decisions, labels or [None] * count, strict=True) if label is not None]
    if not pairs:
        return RetrievalDecisionScores(count, retrieval_rate, 0, None, None, None, None)
    labelled_decisions = [bool(d) for d, _ in pairs]
    gold = [bool(label) for _, label in pairs]
    accuracy = _safe_ratio(sum(1 for d, label in pairs if bool(d) == bool(label)), len(pairs))
    classes = sorted(set(gold))
    per_class = [_class_precision_recall(labelled_decisions, gold, positive) for positive in classes]
    precision = sum(p for p, _ in per_class) / len(per_class)
    recall = sum(r for _, r in per_class) / len(per_class)
    # The paper's F1 is the harmonic mean of macro precision and macro recall (Table 10: 50.0, 22.8 -> 31.3).
    f1 = _safe_ratio(2 * precision * recall, precision + recall)
    return RetrievalDecisionScores(count, retrieval_rate, len(pairs), accuracy, precision, recall, f1)


def retrieval_auroc(p_yes: Sequence[float | None], labels: Sequence[bool | None]) -> float | None:
    """Area under the ROC curve of P(yes) as a needs-retrieval score: the chance that a question needing
    retrieval gets a higher P(yes) than one that does not (ties count half). Threshold-free, so it shows
    whether a gate's probability separates the classes even when the 0.5 cut is miscalibrated. None when a
    class is missing; unlabelled questions and missing probabilities are left out."""
    from icr2_components.evaluation.statistics.auroc import auroc_rows

    pairs = [(float(p), float(bool(label))) for p, label in zip(p_yes, labels, strict=True)
             if p is not None and label is not None]
    if not pairs:
        return None
    value = float(auroc_rows([p for p, _ in pairs], [label for _, label in pairs]))
    return None if math.isnan(value) else value
