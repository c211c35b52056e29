"""`vanilla`: the plain yes/no prompt of RetrievalQA (https://arxiv.org/abs/2402.16457, Fig. 5), the
model-based baseline."""

from __future__ import annotations

from icr2_components.gates.gate_decider import (
    GateDecider,
    GateDecision,
    GateQuestion,
    YesNoModel,
    register_gate_decider,
)
from icr2_components.gates.prompts import render_vanilla_prompt


@register_gate_decider("vanilla")
class VanillaPromptDecider(GateDecider):
    """Asks the model the Fig. 5 prompt; retrieves when it says yes (P(yes) >= 0.5, or a parsed "[Yes]")."""

    def decide(self, question: GateQuestion, model: YesNoModel | None) -> GateDecision:
        prompt = render_vanilla_prompt(question.query)
        return GateDecision.at_cut(self.model_to_ask(model).ask(prompt), prompt=prompt)
