"""Adaptive retrieval gates: TimeAwareRetrievalGate (TA-ARE and its baselines), prompts, demonstration pools."""

from icr2_components.gates.demonstrations import DemonstrationSelector, load_demonstration_pool
from icr2_components.gates.prompts import Demonstration, render_ta_are_prompt, render_vanilla_prompt
from icr2_components.gates.time_aware_retrieval_gate import TimeAwareRetrievalGate
from icr2_components.gates.yes_no_scoring import parse_yes_no_reply, score_yes_no

__all__ = [
    "Demonstration",
    "DemonstrationSelector",
    "TimeAwareRetrievalGate",
    "load_demonstration_pool",
    "parse_yes_no_reply",
    "render_ta_are_prompt",
    "render_vanilla_prompt",
    "score_yes_no",
]
