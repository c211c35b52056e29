"""`threshold`: retrieve when P(yes) under the vanilla prompt reaches a threshold, the calibration-based
baseline of RetrievalQA (https://arxiv.org/abs/2402.16457), whose threshold has to be tuned per model and data set:
`icr2 train-gate LABELS --kind threshold` picks it on labelled dev questions for a stated objective and writes it
to an artifact the gate reads (`artifact=`)."""

from __future__ import annotations

from dataclasses import dataclass

from icr2_components.artifacts.gate_artifact import GateArtifact, artifact_file, load_gate_artifact
from icr2_components.gates.gate_decider import (
    GateDecider,
    GateDecision,
    GateQuestion,
    YesNoModel,
    check_artifact_path,
    register_gate_decider,
)
from icr2_components.gates.prompts import render_vanilla_prompt


@dataclass(frozen=True)
class ThresholdParameters:
    """The `threshold` method's own parameters.

    :param threshold: P(yes) at or above which the method retrieves.
    :param artifact: A gate artifact of `icr2 train-gate --kind threshold` (read at `warm_up`): its calibrated
        threshold replaces `threshold` (a run's `threshold` still wins). It records the questions it was
        trained on, which `icr2 compare` then keeps out of its evaluation.
    """

    threshold: float = 0.5
    artifact: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) \
                or not 0.0 <= float(self.threshold) <= 1.0:
            raise ValueError(f"threshold must be a probability in [0, 1], got {self.threshold}.")
        object.__setattr__(self, "threshold", float(self.threshold))
        check_artifact_path(self.artifact)


@register_gate_decider("threshold")
class ThresholdDecider(GateDecider):
    """Asks the model the Fig. 5 prompt and retrieves when P(yes) >= the threshold.

    The threshold is its own `threshold`, or, with its `artifact`, the calibrated one it records (a
    threshold passed to `run` still wins: that is how a sweep asks). P(yes) comes from a local model's logits or a
    server's top log-probabilities; a gate that only parses replies (`local_scoring="generate"`, a chat generator
    not asked for logprobs) refuses this method (``needs_logits``). When a server's reply carries no usable
    log-probabilities, the parsed reply (P(yes) 1.0 or 0.0) is compared with the threshold instead, counted in the
    gate's `stats["reply_fallbacks"]`.
    """

    needs_logits = True
    Parameters = ThresholdParameters

    def __init__(self, parameters: ThresholdParameters | None = None, *, device: str | None = None) -> None:
        super().__init__(parameters, device=device)
        self.calibrated: GateArtifact | None = None

    def check(self) -> None:
        artifact = self.parameters.artifact
        if artifact is not None and not artifact_file(artifact).is_file():
            raise ValueError(
                f"Gate artifact not found: {artifact}. Make it with icr2 train-gate LABELS --kind threshold "
                f"--out {artifact}, or leave artifact unset to use the gate's threshold."
            )

    def warm_up(self) -> None:
        artifact = self.parameters.artifact
        if artifact is not None and self.calibrated is None:
            self.calibrated = load_gate_artifact(artifact, ("threshold",), self.name)

    def decide(self, question: GateQuestion, model: YesNoModel | None) -> GateDecision:
        self.warm_up()
        cut = self.parameters.threshold
        if question.cut is not None:
            cut = question.cut
        elif self.calibrated is not None:
            cut = float(self.calibrated.cut)
        prompt = render_vanilla_prompt(question.query)
        return GateDecision.at_cut(self.model_to_ask(model).ask(prompt), cut, prompt=prompt)
