"""Binary context utilisation (CUB, Hagström et al.): did the reader follow the context when it should?

``BCU = 1[pred = t_C]`` with relevant context (gold: the gold answer; conflicting: the substituted answer) and
``BCU = 1[pred = t_M]`` with irrelevant context, where ``t_M`` is the model's memory answer (its closed-book
answer to the same question; the gold answer when no closed-book pipeline ran). A generated answer "equals" a
target when the normalised target is contained in the normalised answer (answer match), since readers pad.
Faithfulness is the mean of BCU over gold and conflicting; robustness is BCU over irrelevant context.
"""

from __future__ import annotations

from collections.abc import Iterable

from icr2_components.evaluation.metrics.answer_match import answer_match
from icr2_components.text.normalization import normalize_answer

CONTEXT_TYPES = ("open", "gold", "conflicting", "irrelevant")
CONTROLLED_CONTEXT_TYPES = ("gold", "conflicting", "irrelevant")


def bcu(prediction: str, targets: Iterable[str]) -> float:
    """1.0 when the prediction contains one of the targets (normalised), else 0.0."""
    return float(answer_match(prediction, targets))


def memory_bcu(prediction: str, memory_answer: str) -> float:
    """BCU against a free-text memory answer: either normalised answer contains the other (and neither is empty)."""
    a, b = normalize_answer(prediction), normalize_answer(memory_answer)
    return float(bool(a) and bool(b) and (a in b or b in a))


def faithfulness(bcu_gold: float | None, bcu_conflicting: float | None) -> float | None:
    """Avg(BCU_gold, BCU_conflicting); None unless both are known."""
    if bcu_gold is None or bcu_conflicting is None:
        return None
    return (bcu_gold + bcu_conflicting) / 2


def pareto_front(points: dict[str, tuple[float, float]]) -> list[str]:
    """Names of the points no other point dominates (higher or equal on both axes, higher on one)."""
    front = []
    for name, (x, y) in points.items():
        dominated = any(
            (ox >= x and oy >= y) and (ox > x or oy > y) for other, (ox, oy) in points.items() if other != name
        )
        if not dominated:
            front.append(name)
    return sorted(front)
