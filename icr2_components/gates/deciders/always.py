"""`always`: retrieve for every query, the always-retrieval baseline of RetrievalQA
(https://arxiv.org/abs/2402.16457)."""

from __future__ import annotations

from icr2_components.gates.gate_decider import (
    GateDecider,
    GateDecision,
    GateQuestion,
    YesNoModel,
    register_gate_decider,
)


@register_gate_decider("always")
class AlwaysRetrieveDecider(GateDecider):
    """Routes every query to retrieval without asking a model (P(yes) 1.0, scoring `fixed`)."""

    needs_model = False

    def decide(self, question: GateQuestion, model: YesNoModel | None) -> GateDecision:
        return GateDecision.fixed(True)
