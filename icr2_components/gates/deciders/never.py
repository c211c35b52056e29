"""`never`: answer every query closed-book, the no-retrieval baseline of RetrievalQA
(https://arxiv.org/abs/2402.16457)."""

from __future__ import annotations

from icr2_components.gates.gate_decider import (
    GateDecider,
    GateDecision,
    GateQuestion,
    YesNoModel,
    register_gate_decider,
)


@register_gate_decider("never")
class NeverRetrieveDecider(GateDecider):
    """Routes every query to `no_retrieval` without asking a model (P(yes) 0.0, scoring `fixed`)."""

    needs_model = False

    def decide(self, question: GateQuestion, model: YesNoModel | None) -> GateDecision:
        return GateDecision.fixed(False)
