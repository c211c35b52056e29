"""`ta_are`: Time-Aware Adaptive REtrieval (RetrievalQA, https://arxiv.org/abs/2402.16457, §4 and Fig. 6).

"Today is <date>." before the instruction, then [Yes] demonstrations chosen per query by embedding similarity
from a pool of questions the model could not answer closed-book and [No] demonstrations from a pool it could.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from icr2_components.gates.demonstrations import (
    DEFAULT_POOL,
    DemonstrationSelector,
    load_demonstration_pool,
    resolve_pool_path,
)
from icr2_components.gates.gate_decider import (
    GateDecider,
    GateDecision,
    GateQuestion,
    YesNoModel,
    register_gate_decider,
)
from icr2_components.gates.prompts import DEMONSTRATION_ORDERS, interleave_demonstrations, render_ta_are_prompt
from icr2_components.models.cache import MODEL_CACHE

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TimeAwareParameters:
    """TA-ARE's own parameters (init parameters of a gate with ``method: ta_are``).

    :param time_aware: Write "Today is <date>." in the prompt (False: the paper's no-date ablation).
    :param n_yes: [Yes] demonstrations per query (a run may override it).
    :param n_no: [No] demonstrations per query (a run may override it).
    :param yes_pool: JSONL of questions the model could not answer, or `default` for the bundled pool.
    :param no_pool: JSONL of questions the model could answer, or `default`.
    :param no_selection: `similar` (by embedding similarity, like [Yes]) or `fixed` (the pool's first lines, like
        the paper's hand-written [No] examples).
    :param demonstration_order: `yes_first` (Yes, No, Yes, No) or `no_first` (No, Yes, No, Yes).
    :param embedding_model: Sentence-transformers model that ranks demonstrations (from the model cache).
    """

    time_aware: bool = True
    n_yes: int = 2
    n_no: int = 2
    yes_pool: str = DEFAULT_POOL
    no_pool: str = DEFAULT_POOL
    no_selection: str = "similar"
    demonstration_order: str = "yes_first"
    embedding_model: str = "all-minilm-l6-v2"

    def __post_init__(self) -> None:
        for name in ("n_yes", "n_no"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}.")
        if self.demonstration_order not in DEMONSTRATION_ORDERS:
            raise ValueError(
                f"demonstration_order must be one of {DEMONSTRATION_ORDERS}, got {self.demonstration_order!r}."
            )
        if self.no_selection not in ("similar", "fixed"):
            raise ValueError(f"no_selection must be 'similar' or 'fixed', got {self.no_selection!r}.")


@register_gate_decider("ta_are")
class TimeAwareDecider(GateDecider):
    """Asks the model the TA-ARE prompt; retrieves when it says yes (P(yes) >= 0.5, or a parsed "[Yes]").

    Reads its own :class:`TimeAwareParameters` (a run may override `n_yes` and `n_no`), the run's `today`, and
    the device for its embedder. The pools are read and embedded in :meth:`warm_up` (or on the first query); the
    judged question itself is never a demonstration.
    """

    Parameters = TimeAwareParameters

    def __init__(self, parameters: TimeAwareParameters | None = None, *, device: str | None = None) -> None:
        super().__init__(parameters, device=device)
        self._selector: DemonstrationSelector | None = None

    def check(self) -> None:
        # A stat, not a read: a pool path that does not exist fails at construction, not at the first query.
        resolve_pool_path(self.parameters.yes_pool, True)
        resolve_pool_path(self.parameters.no_pool, False)

    def warm_up(self) -> None:
        if self._selector is not None:
            return
        parameters = self.parameters
        yes_path = resolve_pool_path(parameters.yes_pool, True)
        no_path = resolve_pool_path(parameters.no_pool, False)
        yes_pool, yes_skips = load_demonstration_pool(yes_path, True)
        no_pool, no_skips = load_demonstration_pool(no_path, False)
        self.input_skips = {"yes_pool": yes_skips.as_dict(), "no_pool": no_skips.as_dict()}
        for report in (yes_skips, no_skips):
            if report.total:
                logger.warning(report.summary())
        if parameters.n_yes and not yes_pool:
            raise ValueError(f"The [Yes] pool {yes_path} has no usable question; n_yes={parameters.n_yes} needs some.")
        if parameters.n_no and not no_pool:
            raise ValueError(f"The [No] pool {no_path} has no usable question; n_no={parameters.n_no} needs some.")
        embedder = MODEL_CACHE.sentence_transformer(parameters.embedding_model, device=self.device)
        self._selector = DemonstrationSelector(yes_pool, no_pool, embedder, no_selection=parameters.no_selection)

    def decide(self, question: GateQuestion, model: YesNoModel | None) -> GateDecision:
        self.warm_up()
        assert self._selector is not None  # warm_up sets it
        parameters = self.parameters_for(question)
        yes_examples, no_examples, excluded = self._selector.select(question.query, parameters.n_yes, parameters.n_no)
        demonstrations = interleave_demonstrations(yes_examples, no_examples, parameters.demonstration_order)
        today = question.today if parameters.time_aware else None
        prompt = render_ta_are_prompt(question.query, today, demonstrations)
        answer = self.model_to_ask(model).ask(prompt)
        return GateDecision.at_cut(answer, prompt=prompt, demonstrations=tuple(demonstrations),
                                   excluded_demonstrations=excluded, today=today)
