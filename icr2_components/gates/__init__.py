"""Adaptive retrieval gates: TimeAwareRetrievalGate (TA-ARE and its baselines), its registered deciders (one gate
method a class, under ``deciders/``), prompts and demonstration pools."""

from icr2_components.gates.demonstrations import DemonstrationSelector, load_demonstration_pool
from icr2_components.gates.gate_decider import (
    GateDecider,
    GateDecision,
    GateQuestion,
    YesNoAnswer,
    YesNoModel,
    gate_decider_class,
    gate_decider_names,
    register_gate_decider,
)
from icr2_components.gates.prompts import Demonstration, render_ta_are_prompt, render_vanilla_prompt
from icr2_components.gates.time_aware_retrieval_gate import TimeAwareRetrievalGate
from icr2_components.gates.yes_no_scoring import parse_yes_no_reply, score_yes_no

__all__ = [
    "Demonstration",
    "DemonstrationSelector",
    "GateDecider",
    "GateDecision",
    "GateQuestion",
    "TimeAwareRetrievalGate",
    "YesNoAnswer",
    "YesNoModel",
    "gate_decider_class",
    "gate_decider_names",
    "load_demonstration_pool",
    "parse_yes_no_reply",
    "register_gate_decider",
    "render_ta_are_prompt",
    "render_vanilla_prompt",
    "score_yes_no",
]
