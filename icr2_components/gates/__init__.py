"""Adaptive retrieval gates: TimeAwareRetrievalGate (TA-ARE and its baselines), its registered deciders (one gate
method a class, under ``deciders/``), prompts and demonstration pools."""

from icr2_components.gates.gate_decider import GateDecider, GateDecision, GateQuestion, register_gate_decider
from icr2_components.gates.time_aware_retrieval_gate import TimeAwareRetrievalGate

__all__ = [
    "GateDecider",
    "GateDecision",
    "GateQuestion",
    "TimeAwareRetrievalGate",
    "register_gate_decider",
]
