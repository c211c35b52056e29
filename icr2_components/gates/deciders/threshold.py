"""`threshold`: retrieve when P(yes) under the vanilla prompt reaches a threshold, the calibration-based
baseline of RetrievalQA (https://arxiv.org/abs/2402.16457), whose threshold has to be tuned per model and data set."""

from __future__ import annotations

from icr2_components.gates.gate_decider import (
    GateDecider,
    GateDecision,
    GateQuestion,
    YesNoModel,
    register_gate_decider,
)
from icr2_components.gates.prompts import render_vanilla_prompt


@register_gate_decider("threshold")
class ThresholdDecider(GateDecider):
    """Asks the model the Fig. 5 prompt and retrieves when P(yes) >= the run's `threshold`.

    P(yes) comes from a local model's logits or a server's top log-probabilities; a gate that only parses replies
    (`local_scoring="generate"`, a chat generator not asked for logprobs) refuses this method (``needs_logits``).
    When a server's reply carries no usable log-probabilities, the parsed reply (P(yes) 1.0 or 0.0) is compared
    with the threshold instead, counted in the gate's `stats["reply_fallbacks"]`.
    """

    needs_logits = True

    def decide(self, question: GateQuestion, model: YesNoModel | None) -> GateDecision:
        prompt = render_vanilla_prompt(question.query)
        return GateDecision.at_cut(model.ask(prompt), question.threshold, prompt=prompt)
