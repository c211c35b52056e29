"""`ta_are`: Time-Aware Adaptive REtrieval (RetrievalQA, https://arxiv.org/abs/2402.16457, §4 and Fig. 6).

"Today is <date>." before the instruction, then [Yes] demonstrations chosen per query by embedding similarity
from a pool of questions the model could not answer closed-book and [No] demonstrations from a pool it could.
"""

from __future__ import annotations

import logging

from icr2_components.gates.demonstrations import DemonstrationSelector, load_demonstration_pool, resolve_pool_path
from icr2_components.gates.gate_decider import (
    GateDecider,
    GateDecision,
    GateQuestion,
    YesNoModel,
    register_gate_decider,
)
from icr2_components.gates.prompts import interleave_demonstrations, render_ta_are_prompt
from icr2_components.models.cache import MODEL_CACHE

logger = logging.getLogger(__name__)


@register_gate_decider("ta_are")
class TimeAwareDecider(GateDecider):
    """Asks the model the TA-ARE prompt; retrieves when it says yes (P(yes) >= 0.5, or a parsed "[Yes]").

    Reads the gate's `yes_pool`, `no_pool`, `no_selection`, `demonstration_order`, `embedding_model`, `device`
    and `time_aware`; the run's `n_yes`, `n_no` and `today`. The pools are read and embedded in :meth:`warm_up`
    (or on the first query); the judged question itself is never a demonstration.
    """

    def __init__(self, gate) -> None:
        super().__init__(gate)
        self._selector: DemonstrationSelector | None = None

    def check(self) -> None:
        # A stat, not a read: a pool path that does not exist fails at construction, not at the first query.
        resolve_pool_path(self.gate.yes_pool, True)
        resolve_pool_path(self.gate.no_pool, False)

    def warm_up(self) -> None:
        if self._selector is not None:
            return
        gate = self.gate
        yes_path = resolve_pool_path(gate.yes_pool, True)
        no_path = resolve_pool_path(gate.no_pool, False)
        yes_pool, yes_skips = load_demonstration_pool(yes_path, True)
        no_pool, no_skips = load_demonstration_pool(no_path, False)
        self.input_skips = {"yes_pool": yes_skips.as_dict(), "no_pool": no_skips.as_dict()}
        for report in (yes_skips, no_skips):
            if report.total:
                logger.warning(report.summary())
        if gate.n_yes and not yes_pool:
            raise ValueError(f"The [Yes] pool {yes_path} has no usable question; n_yes={gate.n_yes} needs some.")
        if gate.n_no and not no_pool:
            raise ValueError(f"The [No] pool {no_path} has no usable question; n_no={gate.n_no} needs some.")
        embedder = MODEL_CACHE.sentence_transformer(gate.embedding_model, device=gate.device)
        self._selector = DemonstrationSelector(yes_pool, no_pool, embedder, no_selection=gate.no_selection)

    def decide(self, question: GateQuestion, model: YesNoModel | None) -> GateDecision:
        self.warm_up()
        yes_examples, no_examples, excluded = self._selector.select(question.query, question.n_yes, question.n_no)
        demonstrations = interleave_demonstrations(yes_examples, no_examples, self.gate.demonstration_order)
        today = question.today if self.gate.time_aware else None
        prompt = render_ta_are_prompt(question.query, today, demonstrations)
        return GateDecision.at_cut(model.ask(prompt), prompt=prompt, demonstrations=tuple(demonstrations),
                                   excluded_demonstrations=excluded, today=today)
