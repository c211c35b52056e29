"""`threshold`: retrieve when P(yes) under the vanilla prompt reaches a threshold, the calibration-based
baseline of RetrievalQA (https://arxiv.org/abs/2402.16457), whose threshold has to be tuned per model and data set:
`icr2 train-gate LABELS --kind threshold` picks it on labelled dev questions for a stated objective and writes it
to an artifact the gate reads (`artifact=`)."""

from __future__ import annotations

from pathlib import Path

from icr2_components.artifacts.gate_artifact import GateArtifact, load_gate_artifact
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
    """Asks the model the Fig. 5 prompt and retrieves when P(yes) >= the threshold.

    The threshold is the gate's `threshold`, or, with the gate's `artifact`, the calibrated one it records (a
    threshold passed to `run` still wins: that is how a sweep asks). P(yes) comes from a local model's logits or a
    server's top log-probabilities; a gate that only parses replies (`local_scoring="generate"`, a chat generator
    not asked for logprobs) refuses this method (``needs_logits``). When a server's reply carries no usable
    log-probabilities, the parsed reply (P(yes) 1.0 or 0.0) is compared with the threshold instead, counted in the
    gate's `stats["reply_fallbacks"]`.
    """

    needs_logits = True

    def __init__(self, gate) -> None:
        super().__init__(gate)
        self.calibrated: GateArtifact | None = None

    def check(self) -> None:
        artifact = getattr(self.gate, "artifact", None)
        if artifact is not None and not Path(artifact).is_file():
            raise ValueError(f"Gate artifact not found: {artifact}. Make it with icr2 train-gate LABELS --kind threshold "
                             f"--out {artifact}, or leave artifact unset to use the gate's threshold.")

    def warm_up(self) -> None:
        artifact = getattr(self.gate, "artifact", None)
        if artifact is not None and self.calibrated is None:
            self.calibrated = load_gate_artifact(artifact, ("threshold",), self.name)

    def decide(self, question: GateQuestion, model: YesNoModel | None) -> GateDecision:
        self.warm_up()
        cut = question.threshold
        if self.calibrated is not None and not question.threshold_given:
            cut = float(self.calibrated.cut)
        prompt = render_vanilla_prompt(question.query)
        return GateDecision.at_cut(model.ask(prompt), cut, prompt=prompt)
