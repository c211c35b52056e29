"""Position reorderers: deterministic, budget-aware orderings of a corpus (conventions in ``ordering``)."""

from icr2_components.reorderers.gold_at_position import GoldAtPositionReorderer
from icr2_components.reorderers.lost_in_the_middle import LostInTheMiddleReorderer
from icr2_components.reorderers.primacy import PrimacyReorderer
from icr2_components.reorderers.recency import RecencyReorderer
from icr2_components.reorderers.reverse import ReverseReorderer

__all__ = [
    "GoldAtPositionReorderer",
    "LostInTheMiddleReorderer",
    "PrimacyReorderer",
    "RecencyReorderer",
    "ReverseReorderer",
]
