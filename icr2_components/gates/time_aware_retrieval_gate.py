"""TimeAwareRetrievalGate: a router that sends a query to retrieval only when the model says it needs it."""

from __future__ import annotations

import datetime as _dt
import logging
import time
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.core.serialization import component_from_dict, component_to_dict, import_class_by_name
from haystack.dataclasses import ChatMessage

from icr2_components.gates.demonstrations import (
    DEFAULT_POOL,
    DemonstrationSelector,
    load_demonstration_pool,
    resolve_pool_path,
)
from icr2_components.gates.prompts import (
    DEMONSTRATION_ORDERS,
    interleave_demonstrations,
    render_ta_are_prompt,
    render_vanilla_prompt,
)
from icr2_components.gates.yes_no_scoring import parse_yes_no_reply, score_yes_no
from icr2_components.models.prefix_cache import PrefixKVCache
from icr2_components.models.cache import MODEL_CACHE

logger = logging.getLogger(__name__)

METHODS = ("ta_are", "vanilla", "threshold", "always", "never")
UNPARSED_POLICIES = ("retrieve", "no_retrieval", "error")
LOCAL_SCORINGS = ("logits", "generate")


def parse_today(value: str | _dt.date | None) -> _dt.date | None:
    """An ISO date (``2025-06-01``) or a date -> date; None stays None (meaning: today, at run time)."""
    if value is None or isinstance(value, _dt.date):
        return value
    try:
        return _dt.date.fromisoformat(str(value))
    except ValueError as error:
        raise ValueError(f"today must be an ISO date like '2025-06-01' (or None for today), got {value!r}.") from error


@component
class TimeAwareRetrievalGate:
    """
    Routes a query to `retrieve` or `no_retrieval` by asking the model whether it needs retrieval (RetrievalQA).

    Methods: `ta_are` (Time-Aware Adaptive REtrieval: "Today is <date>." plus [Yes] demonstrations chosen per
    query by embedding similarity from a pool of questions the model could not answer and [No] demonstrations
    from a pool it could), `vanilla` (the plain yes/no prompt), `threshold` (retrieve when P(yes) under the
    vanilla prompt reaches `threshold`: the calibration-based baseline), `always` and `never`.

    With a local model (`model`, from the shared model cache) P(yes) comes from the next-token logits of the
    answer in one forward pass (or sequence log-probabilities when "Yes"/"No" are not single tokens);
    `local_scoring="generate"` instead generates the answer greedily and parses it (the slower baseline). With a
    `chat_generator` (any Haystack ChatGenerator, e.g. one behind an API) the decision is parsed from its reply;
    a reply that says neither yes nor no follows `on_unparsed` and is counted in `stats`. Consecutive prompts
    share their start (system turn, date, instruction), so the gate keeps the last prompt's key/value cache and
    runs only what follows the shared prefix (`reuse_prompt_prefix`).

    Only the chosen output receives the query; `decision` (always sent) holds the decision, P(yes), the prompt,
    the demonstrations and the date used.

    Usage example:
    ```python
    from icr2_components.gates import TimeAwareRetrievalGate

    gate = TimeAwareRetrievalGate(method="ta_are", model="smollm2-135m-instruct", today="2025-06-01")
    gate.warm_up()
    result = gate.run(query="Who won the 2025 Eurovision Song Contest?")
    print(result["decision"]["retrieve"], result["decision"]["p_yes"])
    print("retrieve" in result)   # True when the query was routed to retrieval
    ```
    """

    def __init__(
        self,
        method: str = "ta_are",
        model: str | None = "smollm2-135m-instruct",
        chat_generator: Any = None,
        today: str | None = None,
        time_aware: bool = True,
        n_yes: int = 2,
        n_no: int = 2,
        yes_pool: str = DEFAULT_POOL,
        no_pool: str = DEFAULT_POOL,
        no_selection: str = "similar",
        demonstration_order: str = "yes_first",
        embedding_model: str = "all-minilm-l6-v2",
        threshold: float = 0.5,
        answer_prefix: str = "[",
        yes_answer: str = "Yes",
        no_answer: str = "No",
        on_unparsed: str = "retrieve",
        local_scoring: str = "logits",
        max_new_tokens: int = 8,
        dtype: str = "auto",
        device: str | None = None,
        attn_implementation: str | None = "sdpa",
        reuse_prompt_prefix: bool = True,
    ) -> None:
        """
        :param method: `ta_are`, `vanilla`, `threshold`, `always` or `never`.
        :param model: Local causal LM (Hugging Face id, path or bundled alias) scored by its logits.
        :param chat_generator: A Haystack ChatGenerator; when given, decisions are parsed from its replies and
            `model` is not loaded.
        :param today: ISO date written in the TA-ARE prompt; None means the day of each run.
        :param time_aware: Write "Today is <date>." in the TA-ARE prompt (False: the paper's no-date ablation).
        :param n_yes: [Yes] demonstrations per query (TA-ARE).
        :param n_no: [No] demonstrations per query (TA-ARE).
        :param yes_pool: JSONL of questions the model could not answer, or `default` for the bundled pool.
        :param no_pool: JSONL of questions the model could answer, or `default`.
        :param no_selection: `similar` (by embedding similarity, like [Yes]) or `fixed` (the pool's first lines,
            like the paper's hand-written [No] examples).
        :param demonstration_order: `yes_first` (Yes, No, Yes, No) or `no_first` (No, Yes, No, Yes).
        :param embedding_model: Sentence-transformers model that ranks demonstrations (from the model cache).
        :param threshold: P(yes) at or above which the `threshold` method retrieves.
        :param answer_prefix: Text opening the assistant turn before the scored answer token.
        :param yes_answer: The answer scored as "retrieve".
        :param no_answer: The answer scored as "don't retrieve".
        :param on_unparsed: What a chat-generator reply saying neither yes nor no does: `retrieve`,
            `no_retrieval` or `error`.
        :param local_scoring: `logits` (one forward pass, P(yes) from the next-token logits) or `generate`
            (greedy generation from the same prompt, reply parsed: the slower baseline `bench/gate.py` times).
        :param max_new_tokens: Generation budget of `local_scoring="generate"`.
        :param dtype: Local model dtype (`auto`, `float32`, `float16`, `bfloat16`).
        :param device: Local model device; the best available by default.
        :param attn_implementation: Local model attention implementation.
        :param reuse_prompt_prefix: Keep the key/value cache of the last prompt and run only the tokens after the
            prefix the next prompt shares with it (system turn, date and instruction: about half a TA-ARE
            prompt). Same P(yes) up to float rounding; `local_scoring="logits"` only.
        """
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
        if chat_generator is None and method in ("ta_are", "vanilla", "threshold") and not (isinstance(model, str) and model.strip()):
            raise ValueError(f"method={method!r} needs a model (a Hugging Face id, path or bundled alias) or a chat_generator.")
        if chat_generator is not None and not callable(getattr(chat_generator, "run", None)):
            raise ValueError("chat_generator must be a Haystack ChatGenerator: a component with run(messages=...).")
        if chat_generator is not None and method == "threshold":
            raise ValueError(
                "method='threshold' needs P(yes) from a local model's logits; a chat_generator only gives a parsed "
                "reply. Use method='vanilla' or 'ta_are' with the chat_generator, or pass model= instead."
            )
        for name, value in (("n_yes", n_yes), ("n_no", n_no)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}.")
        if not 0.0 <= float(threshold) <= 1.0:
            raise ValueError(f"threshold must be a probability in [0, 1], got {threshold}.")
        if on_unparsed not in UNPARSED_POLICIES:
            raise ValueError(f"on_unparsed must be one of {UNPARSED_POLICIES}, got {on_unparsed!r}.")
        if not yes_answer.strip() or not no_answer.strip() or yes_answer == no_answer:
            raise ValueError("yes_answer and no_answer must be two different non-empty strings.")
        if demonstration_order not in DEMONSTRATION_ORDERS:
            raise ValueError(f"demonstration_order must be one of {DEMONSTRATION_ORDERS}, got {demonstration_order!r}.")
        if local_scoring not in LOCAL_SCORINGS:
            raise ValueError(f"local_scoring must be one of {LOCAL_SCORINGS}, got {local_scoring!r}.")
        if local_scoring == "generate" and method == "threshold":
            raise ValueError("method='threshold' needs P(yes) from logits; use local_scoring='logits'.")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}.")
        if no_selection not in ("similar", "fixed"):
            raise ValueError(f"no_selection must be 'similar' or 'fixed', got {no_selection!r}.")
        parse_today(today)
        # Fail at construction, not at the first query, when a pool path is wrong.
        if method == "ta_are":
            resolve_pool_path(yes_pool, True)
            resolve_pool_path(no_pool, False)
        self.method = method
        self.model = model
        self.chat_generator = chat_generator
        self.today = today
        self.time_aware = time_aware
        self.n_yes = n_yes
        self.n_no = n_no
        self.yes_pool = yes_pool
        self.no_pool = no_pool
        self.no_selection = no_selection
        self.demonstration_order = demonstration_order
        self.embedding_model = embedding_model
        self.threshold = float(threshold)
        self.answer_prefix = answer_prefix
        self.yes_answer = yes_answer
        self.no_answer = no_answer
        self.on_unparsed = on_unparsed
        self.local_scoring = local_scoring
        self.max_new_tokens = max_new_tokens
        self.dtype = dtype
        self.device = device
        self.attn_implementation = attn_implementation
        self.reuse_prompt_prefix = bool(reuse_prompt_prefix)
        self._prefix_cache = PrefixKVCache() if self.reuse_prompt_prefix else None
        self._model = None
        self._tokenizer = None
        self._selector: DemonstrationSelector | None = None
        self.pool_skips: dict[str, dict] = {}
        self.stats = {"decisions": 0, "retrieve": 0, "unparsed_replies": 0, "excluded_demonstrations": 0}

    # -- loading -----------------------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Load the local model (unless a chat generator decides) and, for TA-ARE, the pools and embedder."""
        if self.chat_generator is not None:
            if hasattr(self.chat_generator, "warm_up"):
                self.chat_generator.warm_up()
        elif self._model is None and self.method in ("ta_are", "vanilla", "threshold"):
            self._load_model()
        if self.method == "ta_are":
            self._load_selector()

    def _load_model(self) -> None:
        if self._model is None:
            self._model, self._tokenizer = MODEL_CACHE.causal_lm(
                self.model, dtype=self.dtype, device=self.device, attn_implementation=self.attn_implementation
            )

    def _load_selector(self) -> DemonstrationSelector:
        if self._selector is None:
            yes_path = resolve_pool_path(self.yes_pool, True)
            no_path = resolve_pool_path(self.no_pool, False)
            yes_pool, yes_skips = load_demonstration_pool(yes_path, True)
            no_pool, no_skips = load_demonstration_pool(no_path, False)
            self.pool_skips = {"yes_pool": yes_skips.as_dict(), "no_pool": no_skips.as_dict()}
            for report in (yes_skips, no_skips):
                if report.total:
                    logger.warning(report.summary())
            if self.n_yes and not yes_pool:
                raise ValueError(f"The [Yes] pool {yes_path} has no usable question; n_yes={self.n_yes} needs some.")
            if self.n_no and not no_pool:
                raise ValueError(f"The [No] pool {no_path} has no usable question; n_no={self.n_no} needs some.")
            embedder = MODEL_CACHE.sentence_transformer(self.embedding_model, device=self.device)
            self._selector = DemonstrationSelector(yes_pool, no_pool, embedder, no_selection=self.no_selection)
        return self._selector

    # -- prompts -----------------------------------------------------------------------------------------

    def build_prompt(
        self, query: str, method: str, today: _dt.date | None, n_yes: int, n_no: int
    ) -> tuple[str, list[dict], int]:
        """The user prompt for ``method``, the demonstrations it holds, and how many pool entries equal the query."""
        if method == "ta_are":
            yes_examples, no_examples, excluded = self._load_selector().select(query, n_yes, n_no)
            demonstrations = interleave_demonstrations(yes_examples, no_examples, self.demonstration_order)
            prompt = render_ta_are_prompt(query, today if self.time_aware else None, demonstrations)
            return prompt, [{"question": d.question, "label": d.label, "source": d.source} for d in demonstrations], excluded
        return render_vanilla_prompt(query), [], 0

    def render_for_model(self, prompt: str) -> str:
        """The chat-templated text the local model scores: the prompt as a user turn, then the answer prefix."""
        self._load_model()
        rendered = self._tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        return rendered + self.answer_prefix

    # -- run ---------------------------------------------------------------------------------------------

    @component.output_types(retrieve=str, no_retrieval=str, decision=dict)
    def run(
        self,
        query: str,
        today: str | None = None,
        method: str | None = None,
        threshold: float | None = None,
        n_yes: int | None = None,
        n_no: int | None = None,
    ) -> dict[str, Any]:
        """
        :param query: The question to route.
        :param today: ISO date overriding the init value for this call.
        :param method: Method overriding the init value for this call.
        :param threshold: Threshold overriding the init value (method `threshold`).
        :param n_yes: [Yes] demonstrations for this call.
        :param n_no: [No] demonstrations for this call.
        :returns: `retrieve` or `no_retrieval` (the query, on the chosen output only) and `decision`.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError("TimeAwareRetrievalGate.run needs a non-empty query string; got an empty question.")
        method = method or self.method
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
        if method == "threshold" and (self.chat_generator is not None or self.local_scoring == "generate"):
            raise ValueError("method='threshold' needs P(yes) from a local model's logits; this gate parses replies.")
        if method not in ("always", "never") and self.chat_generator is None and not self.model:
            raise ValueError(f"method={method!r} needs a model; this gate was built without one (model=None).")
        threshold = self.threshold if threshold is None else float(threshold)
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}.")
        n_yes = self.n_yes if n_yes is None else n_yes
        n_no = self.n_no if n_no is None else n_no
        if n_yes < 0 or n_no < 0:
            raise ValueError("n_yes and n_no must be >= 0.")
        day = parse_today(today) or parse_today(self.today) or _dt.date.today()
        query = query.strip()
        start = time.perf_counter()
        decision: dict[str, Any] = {
            "method": method, "today": day.isoformat() if method == "ta_are" and self.time_aware else None,
            "prompt": "", "demonstrations": [], "excluded_demonstrations": 0, "reply": None, "parsed": None,
            "answer_mass": None,
        }
        if method in ("always", "never"):
            retrieve = method == "always"
            decision.update(p_yes=1.0 if retrieve else 0.0, scoring="fixed")
        else:
            prompt, demonstrations, excluded = self.build_prompt(query, method, day, n_yes, n_no)
            decision.update(prompt=prompt, demonstrations=demonstrations, excluded_demonstrations=excluded)
            self.stats["excluded_demonstrations"] += excluded
            if self.chat_generator is not None:
                retrieve = self._decide_from_reply(self._chat_generator_reply(prompt), decision)
            elif self.local_scoring == "generate":
                rendered = self.render_for_model(prompt)
                decision["rendered_prompt"] = rendered
                retrieve = self._decide_from_reply(self._generated_reply(rendered), decision)
            else:
                self._load_model()
                rendered = self.render_for_model(prompt)
                score = score_yes_no(self._model, self._tokenizer, rendered, self.yes_answer, self.no_answer,
                                     prefix_cache=self._prefix_cache)
                cut = threshold if method == "threshold" else 0.5
                retrieve = score.p_yes >= cut
                decision.update(p_yes=score.p_yes, scoring=score.scoring, answer_mass=score.answer_mass,
                                rendered_prompt=rendered, threshold=cut, reused_prefix_tokens=score.reused_prefix_tokens)
        decision["retrieve"] = retrieve
        decision["latency_s"] = time.perf_counter() - start
        self.stats["decisions"] += 1
        self.stats["retrieve"] += int(retrieve)
        route = "retrieve" if retrieve else "no_retrieval"
        return {route: query, "decision": decision}

    def _chat_generator_reply(self, prompt: str) -> str:
        result = self.chat_generator.run(messages=[ChatMessage.from_user(prompt)])
        replies = result.get("replies") or []
        return (replies[0].text if replies else "") or ""

    def _generated_reply(self, rendered: str) -> str:
        """Greedy continuation of the rendered prompt (after the answer prefix), special tokens dropped."""
        import torch

        ids = self._tokenizer(rendered, add_special_tokens=False, return_tensors="pt")["input_ids"].to(self._model.device)
        with torch.inference_mode():
            output = self._model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=self.max_new_tokens,
                do_sample=False, temperature=None, top_p=None, top_k=None, pad_token_id=self._tokenizer.pad_token_id,
            )
        return self._tokenizer.decode(output[0, ids.shape[1]:], skip_special_tokens=True).strip()

    def _decide_from_reply(self, text: str, decision: dict[str, Any]) -> bool:
        parsed = parse_yes_no_reply(text)
        decision.update(reply=text, parsed=parsed is not None, scoring="reply")
        if parsed is None:
            self.stats["unparsed_replies"] += 1
            if self.on_unparsed == "error":
                raise ValueError(f"The chat generator's reply says neither yes nor no: {text[:120]!r}.")
            logger.warning("Gate reply says neither yes nor no (%r); routing to %s.", text[:80], self.on_unparsed)
            parsed = self.on_unparsed == "retrieve"
            decision["p_yes"] = None
        else:
            decision["p_yes"] = 1.0 if parsed else 0.0
        return parsed

    # -- serialization -----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        generator = component_to_dict(self.chat_generator, "chat_generator") if self.chat_generator is not None else None
        return default_to_dict(
            self, method=self.method, model=self.model, chat_generator=generator, today=self.today,
            time_aware=self.time_aware, n_yes=self.n_yes, n_no=self.n_no, yes_pool=self.yes_pool,
            no_pool=self.no_pool, no_selection=self.no_selection, demonstration_order=self.demonstration_order,
            embedding_model=self.embedding_model,
            threshold=self.threshold, answer_prefix=self.answer_prefix, yes_answer=self.yes_answer,
            no_answer=self.no_answer, on_unparsed=self.on_unparsed, local_scoring=self.local_scoring,
            max_new_tokens=self.max_new_tokens, dtype=self.dtype, device=self.device,
            attn_implementation=self.attn_implementation, reuse_prompt_prefix=self.reuse_prompt_prefix,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TimeAwareRetrievalGate":
        parameters = dict(data.get("init_parameters", {}))
        generator = parameters.get("chat_generator")
        if isinstance(generator, dict):
            generator_class = import_class_by_name(generator["type"])
            parameters["chat_generator"] = component_from_dict(generator_class, generator, "chat_generator")
        return default_from_dict(cls, {**data, "init_parameters": parameters})
