"""The papers' experiments as data, each registered by name (``icr2 reproduce NAME``, ``icr2 reproduce --list``):
``lost_in_the_middle`` (Lost in the Middle's multi-document QA), ``kv_retrieval`` (its synthetic key-value
retrieval), ``icr2_benchmark`` (ICR2's Table 2 at corpus budgets, random against retrieved confounders), ``cub``
(CUB's techniques over gold, conflicting and irrelevant contexts), ``retrieval_gate`` (RetrievalQA's gates,
retrieval rate against accuracy) and ``icr2_fine_tuning`` (ICR2's Table 3: the fine-tuning arms; its arms as data in
``icr2_fine_tuning_arms``, its ``--train`` step in ``icr2_fine_tuning_training``, its tables and plot in
``icr2_fine_tuning_report``). The protocol they follow is in ``protocol``, the curve shape of Lost in the
Middle's two in ``curve``, the run through ``icr2 compare``'s machinery in ``runner``, the report in ``report``."""

from icr2_components.evaluation.experiments.curve import CurveExperiment
from icr2_components.evaluation.experiments.protocol import (
    Condition,
    Experiment,
    Variant,
    get_experiment,
    register_experiment,
)

__all__ = [
    "Condition",
    "CurveExperiment",
    "Experiment",
    "Variant",
    "get_experiment",
    "register_experiment",
]
