"""The papers' experiments as data, each registered by name (``icr2 reproduce NAME``): ``kv_retrieval`` (Lost in
the Middle's synthetic key-value retrieval), ``lost_in_the_middle`` (its multi-document QA); the protocol they
follow is in ``protocol``, the run through ``icr2 compare``'s machinery in ``runner``, the report in ``report``."""

from icr2_components.evaluation.experiments.protocol import (
    Condition,
    CurveExperiment,
    Experiment,
    PaperFigure,
    RunSettings,
    Variant,
    experiment_names,
    get_experiment,
    register_experiment,
)

__all__ = ["Condition", "CurveExperiment", "Experiment", "PaperFigure", "RunSettings", "Variant", "experiment_names",
           "get_experiment", "register_experiment"]
