"""TimeAwareRetrievalGate: a router that sends a query to retrieval only when the model says it needs it."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import datetime as _dt
import inspect
import logging
import threading
import time
from typing import Any, ClassVar

from haystack import component, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.dataclasses import ChatMessage

from icr2_components.errors import ContextTooLongError
from icr2_components.gates.gate_decider import (
    REPLY_SCORING,
    GateDecider,
    GateQuestion,
    YesNoAnswer,
    gate_decider_class,
    gate_parameter_owners,
)
from icr2_components.gates.yes_no_scoring import parse_yes_no_reply, score_yes_no, score_yes_no_top_logprobs
from icr2_components.models.cache import MODEL_CACHE
from icr2_components.models.generation_settings import decoding_arguments
from icr2_components.models.introspection import context_limit
from icr2_components.models.prefix_cache import PrefixKVCache
from icr2_components.models.served_model import ServedModel, ServedModelError, served_chat_errors
from icr2_components.parameters import non_negative_int, number_between, one_of, positive_int
from icr2_components.strict_mapping import dataclass_from_mapping

logger = logging.getLogger(__name__)

UNPARSED_POLICIES = ("retrieve", "no_retrieval", "error")
LOCAL_SCORINGS = ("logits", "generate")
MAX_TOP_LOGPROBS = 20
"""OpenAI's and vLLM's (default) limit on `top_logprobs`; TGI allows 5."""


_ASKING_SERVER = contextvars.ContextVar("icr2_gate_asking_server", default=False)


class _ExpectedTruncation(logging.Filter):
    """Drops Haystack's "completion truncated" warning while the gate asks a server: it asks for a few tokens on
    purpose (the answer is read from the first ones), so every reply is cut short and the warning says nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            _ASKING_SERVER.get() and "truncated before reaching a natural stopping point" in record.getMessage()
        )


_TRUNCATION_FILTER = _ExpectedTruncation()


class _Unanswered(Exception):
    """A decider asked a prompt that `run_async` has not answered yet (raised through the decider to the gate)."""

    def __init__(self, prompt: str) -> None:
        super().__init__(prompt)
        self.prompt = prompt


class _AnsweredPrompts:
    """The model a decider sees in `run_async`: the answers awaited so far, by prompt; any other prompt is
    `_Unanswered`, so the gate awaits its answer and lets the decider decide again."""

    def __init__(self, answers: dict[str, YesNoAnswer]) -> None:
        self.answers = answers

    def ask(self, prompt: str) -> YesNoAnswer:
        if prompt not in self.answers:
            raise _Unanswered(prompt)
        return self.answers[prompt]


def asks_for_logprobs(chat_generator: Any) -> bool:
    """Whether a chat generator is configured to return log-probabilities (``generation_kwargs["logprobs"]``)."""
    kwargs = getattr(chat_generator, "generation_kwargs", None)
    return isinstance(kwargs, dict) and bool(kwargs.get("logprobs"))


def parse_today(value: str | _dt.date | None) -> _dt.date | None:
    """An ISO date (``2025-06-01``) or a date -> date; None stays None (meaning: today, at run time)."""
    if value is None or isinstance(value, _dt.date):
        return value
    try:
        return _dt.date.fromisoformat(str(value))
    except ValueError as error:
        raise ValueError(f"today must be an ISO date like '2025-06-01' (or None for today), got {value!r}.") from error


@dataclasses.dataclass(frozen=True)
class GateModelSettings:
    """How the gate loads and asks a local model: the `model_settings` mapping of `TimeAwareRetrievalGate`.

    :param dtype: `auto`, `float32`, `float16` or `bfloat16`.
    :param device: `cpu`, `cuda`...; the best available by default (also the device of a method's embedder).
    :param attn_implementation: the local model's attention implementation.
    :param local_scoring: `logits` (one forward pass, P(yes) from the next-token logits) or `generate` (greedy
        generation from the same prompt, reply parsed: the slower baseline `bench/gate.py` times).
    :param reuse_prompt_prefix: keep the key/value cache of the last prompt and run only the tokens after the
        prefix the next prompt shares with it (system turn, date and instruction: about half a TA-ARE prompt).
        Same P(yes) up to float rounding; `local_scoring="logits"` only.
    """

    dtype: str = "auto"
    device: str | None = None
    attn_implementation: str | None = "sdpa"
    local_scoring: str = "logits"
    reuse_prompt_prefix: bool = True

    def __post_init__(self) -> None:
        one_of(self.local_scoring, "model_settings.local_scoring", LOCAL_SCORINGS)

    @classmethod
    def from_mapping(cls, values: Any) -> GateModelSettings:
        """Built from a mapping (None: the defaults); unknown keys and wrongly typed values are refused by name."""
        return dataclass_from_mapping(cls, values, "TimeAwareRetrievalGate model_settings", ValueError)


@component
class TimeAwareRetrievalGate:
    """
    Routes a query to `retrieve` or `no_retrieval` by asking the model whether it needs retrieval.

    The adaptive retrieval of the paper ["RetrievalQA: Assessing Adaptive Retrieval-Augmented Generation for
    Short-form Open-Domain Question Answering"](https://arxiv.org/abs/2402.16457) (Zhang et al., Findings of ACL
    2024), with its method TA-ARE and its baselines. Methods are registered gate deciders
    (`icr2_components/gates/deciders/`, one file each): `ta_are` (Time-Aware Adaptive REtrieval: "Today is
    <date>." plus [Yes] demonstrations chosen per query by embedding similarity from a pool of questions the model
    could not answer and [No] demonstrations from a pool it could), `vanilla` (the plain yes/no prompt),
    `threshold` (retrieve when P(yes) under the vanilla prompt reaches `threshold`: the calibration-based
    baseline; with `artifact`, the threshold `icr2 train-gate --kind threshold` picked on labelled dev questions
    for an objective), `learned` (no language model asked: a logistic regression or SKR-style nearest neighbours
    over the question's MiniLM embedding and cheap signals, trained by `icr2 train-gate` on the reader's own
    need labels from `icr2 label-retrieval-need`, read from `artifact`), `always` and `never`;
    `register_gate_decider` adds one. Whether a gate pays off for a reader is measured by `icr2 eval-gate
    --labels` (retrieval rate against answer match, with intervals): on SmolLM2-135M TA-ARE's P(yes) ranks need
    at chance, so TA-ARE needs a capable reader (docs/benchmarks/gate.md).

    Where the model runs:

    * a local model (`model`, from the shared model cache): P(yes) comes from the next-token logits of the
      answer in one forward pass (or sequence log-probabilities when "Yes"/"No" are not single tokens);
      `model_settings={"local_scoring": "generate"}` instead generates the answer greedily and parses it (the
      slower baseline). Consecutive prompts share their start (system turn, date, instruction), so the gate keeps
      the last prompt's key/value cache and runs only what follows the shared prefix (`reuse_prompt_prefix`).
      A prompt longer than the model's context is refused (`ContextTooLongError`, a 4xx in `icr2 serve`, one
      error record in `icr2 compare`) rather than scored: past the context the model reads positions it was
      never trained on, and a P(yes) from them would look like any other decision.
    * an OpenAI-compatible server (`server`: vLLM, llama.cpp, Ollama, TGI, OpenAI; the keys of a backend's
      `served_model`): the gate asks through Haystack's `OpenAIChatGenerator` for a few greedy tokens with
      `logprobs` and `top_logprobs`, and P(yes) comes from the probabilities of the answer variants ("Yes",
      " yes", "[Yes", ...) among the top tokens of the first answer position (a chat API cannot open the answer
      with "[", so generated "[" and spaces are skipped): scoring `top_logprobs`, with `answer_mass` the yes+no
      share. The `threshold` method works over the server too. `icr2 compare --backend
      backends/llama_cpp_server.yaml` turns a local gate into this one (its `backend_role`). A server that is
      down or slow is one `ServedModelError` line, after `timeout_s` and `max_retries` at most.
    * any Haystack ChatGenerator (`chat_generator`): P(yes) from its replies' log-probabilities when it returns
      them (`reply.meta["logprobs"]`, e.g. an `OpenAIChatGenerator` with `generation_kwargs` `logprobs` and
      `top_logprobs`), else the decision is parsed from its reply.

    A reply without usable log-probabilities (a server that sends none, or neither answer among the top tokens)
    is parsed instead (scoring `reply`, counted in `stats["reply_fallbacks"]`); a reply that says neither yes nor
    no follows `on_unparsed` and is counted in `stats["unparsed_replies"]`.

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

    # the same gate asking llama.cpp's OpenAI-compatible server (bash scripts/llama_server.sh start)
    served = TimeAwareRetrievalGate(method="ta_are", model=None, today="2025-06-01",
                                    server={"api_base_url": "http://127.0.0.1:8089/v1",
                                            "model": "smollm2-135m-instruct", "timeout_s": 30, "max_retries": 1})
    decision = served.run(query="Who won the 2025 Eurovision Song Contest?")["decision"]
    print(decision["scoring"], decision["p_yes"], decision["answer_mass"])   # top_logprobs 0.3... 0.1...
    ```

    A learned gate (no language model loaded; `icr2 train-gate LABELS --kind logistic --out gate.json`):
    ```python
    learned = TimeAwareRetrievalGate(method="learned", model=None, artifact="runs/gate/learned.json")
    print(learned.run(query="Who won the 2025 Eurovision Song Contest?")["decision"]["p_yes"])
    ```

    In a pipeline YAML the served gate is
    ```yaml
    gate:
      type: icr2_components.gates.time_aware_retrieval_gate.TimeAwareRetrievalGate
      init_parameters:
        method: ta_are
        model: null
        server: {api_base_url: "http://127.0.0.1:8089/v1", model: smollm2-135m-instruct, timeout_s: 120, max_retries: 2}
    ```
    """

    backend_role: ClassVar[str] = "yes_no_asker"
    """Under a backend (`icr2_components.backends`) the kind decides whom the gate asks: a served kind its server
    (P(yes) from top log-probabilities, `server`), a local one naming a model that model."""

    def __init__(
        self,
        method: str = "ta_are",
        model: str | None = "smollm2-135m-instruct",
        chat_generator: Any = None,
        server: dict[str, Any] | None = None,
        today: str | None = None,
        answer_prefix: str = "[",
        yes_answer: str = "Yes",
        no_answer: str = "No",
        on_unparsed: str = "retrieve",
        max_new_tokens: int = 8,
        top_logprobs: int = MAX_TOP_LOGPROBS,
        model_settings: dict[str, Any] | None = None,
        **method_parameters: Any,
    ) -> None:
        """
        :param method: A registered gate decider: `ta_are`, `vanilla`, `threshold`, `always`, `never`, or one
            added with `register_gate_decider` (see `gate_decider_names()`).
        :param model: Local causal LM (Hugging Face id, path or bundled alias) scored by its logits.
        :param chat_generator: A Haystack ChatGenerator; when given, `model` is not loaded and P(yes) comes from
            its replies' log-probabilities when it returns them, else the decision is parsed from its reply.
        :param server: An OpenAI-compatible server to ask instead of a local model: `api_base_url` (ending in
            `/v1`), `model` (the served name) and optionally `api_key_env`, `timeout_s`, `max_retries` (the keys of
            `ServedModel`; `context_length` and `tokenizer` are accepted and unused: the gate's prompt is short).
            `model` is then not loaded. Not together with `chat_generator`.
        :param today: ISO date written in the TA-ARE prompt; None means the day of each run.
        :param answer_prefix: Text opening the assistant turn before the scored answer token.
        :param yes_answer: The answer scored as "retrieve".
        :param no_answer: The answer scored as "don't retrieve".
        :param on_unparsed: What a chat-generator reply saying neither yes nor no does: `retrieve`,
            `no_retrieval` or `error`.
        :param max_new_tokens: Generation budget of `local_scoring="generate"`, and the `max_tokens` asked of a
            server (the answer is read from the first tokens; the rest is for a reply parsed as a fallback).
        :param top_logprobs: Most likely tokens a server returns per position (OpenAI and vLLM allow up to 20, TGI
            5): the more, the rarer a fallback to parsing because neither answer was among them.
        :param model_settings: How the local model is loaded and asked, one mapping (YAML keys; see
            `GateModelSettings`): `dtype`, `device` (also the methods' embedder's), `attn_implementation`,
            `local_scoring` (`logits` or `generate`) and `reuse_prompt_prefix`. Unset keys keep their defaults.
        :param method_parameters: The method's own parameters, as init parameters (YAML keys) of the gate: each
            registered method declares them in its frozen `Parameters` dataclass and receives only those (TA-ARE:
            `time_aware`, `n_yes`, `n_no`, `yes_pool`, `no_pool`, `no_selection`, `demonstration_order`,
            `embedding_model`; threshold: `threshold`, `artifact`; learned: `artifact`). A key no registered method
            owns is an error naming the owners of each key; every method that owns a given key checks its value.
        :raises ValueError: a value out of range, an unknown key, or a method without what it needs.
        """
        moved = sorted(set(method_parameters) & {f.name for f in dataclasses.fields(GateModelSettings)})
        if moved:
            raise ValueError(f"TimeAwareRetrievalGate: {moved} are keys of model_settings now, e.g. "
                             f"model_settings={{{moved[0]!r}: ...}}.")
        local = GateModelSettings.from_mapping(model_settings)
        local_scoring = local.local_scoring
        decider_class = gate_decider_class(method)
        if server is not None and chat_generator is not None:
            raise ValueError("Give the gate either a chat_generator or a server, not both.")
        served = self._check_server(server) if server is not None else None
        if (chat_generator is None and served is None and decider_class.needs_model
                and not (isinstance(model, str) and model.strip())):
            raise ValueError(f"method={method!r} needs a model (a Hugging Face id, path or bundled alias), a server "
                             "or a chat_generator.")
        if chat_generator is not None and not callable(getattr(chat_generator, "run", None)):
            raise ValueError("chat_generator must be a Haystack ChatGenerator: a component with run(messages=...).")
        if chat_generator is not None and decider_class.needs_logits and not asks_for_logprobs(chat_generator):
            raise ValueError(
                f"method={method!r} needs P(yes); this chat_generator is not asked for log-probabilities, so it only "
                "gives a reply to parse. Pass server= (the gate asks for logprobs), a chat_generator whose "
                "generation_kwargs set logprobs and top_logprobs, or model= (a local model's logits)."
            )
        if (isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int)
                or not 1 <= top_logprobs <= MAX_TOP_LOGPROBS):
            raise ValueError(f"top_logprobs must be an integer from 1 to {MAX_TOP_LOGPROBS}, got {top_logprobs!r}.")
        if on_unparsed not in UNPARSED_POLICIES:
            raise ValueError(f"on_unparsed must be one of {UNPARSED_POLICIES}, got {on_unparsed!r}.")
        if not yes_answer.strip() or not no_answer.strip() or yes_answer == no_answer:
            raise ValueError("yes_answer and no_answer must be two different non-empty strings.")
        if local_scoring == "generate" and decider_class.needs_logits and chat_generator is None and served is None:
            raise ValueError(f"method={method!r} needs P(yes) from logits; use local_scoring='logits'.")
        positive_int(max_new_tokens, "max_new_tokens")
        parse_today(today)
        self.method_parameters = self._check_method_parameters(method_parameters)
        """The methods' own parameters as given (YAML keys); each decider gets the ones its `Parameters` declares."""
        self.method = method
        self.model = model
        self.chat_generator = chat_generator
        self.server = dict(server) if server is not None else None
        self.today = today
        self.answer_prefix = answer_prefix
        self.yes_answer = yes_answer
        self.no_answer = no_answer
        self.on_unparsed = on_unparsed
        self.max_new_tokens = max_new_tokens
        self.top_logprobs = top_logprobs
        self._local = local
        self.model_settings = dataclasses.asdict(local)
        """The local model's settings, every key stated (defaults filled), so a saved YAML says what ran."""
        self._prefix_cache = PrefixKVCache() if local.reuse_prompt_prefix else None
        self._model: Any | None = None  # the local model and its tokenizer, loaded by _local_model
        self._tokenizer: Any | None = None
        self._served = served
        self._server_generator = None
        self.stats = {"decisions": 0, "retrieve": 0, "unparsed_replies": 0, "reply_fallbacks": 0,
                      "excluded_demonstrations": 0}
        self._stats_lock = threading.Lock()  # a served gate is asked from several threads (compare, eval-gate)
        """`reply_fallbacks`: decisions parsed from a reply that carried no usable log-probabilities;
        `unparsed_replies`: replies that said neither yes nor no."""
        self._deciders: dict[str, GateDecider] = {}
        self._decider(method)  # the method's own checks (e.g. that its pool files exist), reading no file

    @staticmethod
    def _check_method_parameters(values: dict[str, Any]) -> dict[str, Any]:
        """Every key is owned by a registered method, and every owner accepts its value (its Parameters' checks)."""
        owners = gate_parameter_owners()
        unknown = sorted(set(values) - set(owners))
        if unknown:
            offered = "; ".join(f"{name} ({', '.join(methods)})" for name, methods in sorted(owners.items()))
            raise ValueError(f"TimeAwareRetrievalGate got {unknown}: neither a gate parameter nor a parameter of a "
                             f"registered gate method. The methods' parameters are: {offered}.")
        for method in sorted({m for name in values for m in owners[name]}):
            gate_decider_class(method).parameters_from(values)
        return dict(values)

    @staticmethod
    def _check_server(server: Any) -> ServedModel:
        if not isinstance(server, dict):
            raise ValueError("server must be a mapping of ServedModel keys (api_base_url, model, api_key_env, "
                             f"timeout_s, max_retries), got {server!r}.")
        return ServedModel.from_dict(dict(server), "TimeAwareRetrievalGate server")

    # -- loading -----------------------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Load the local model (unless a server or a chat generator decides) and what the method reads (TA-ARE:
        the pools and the embedder that ranks them)."""
        decider = self._decider(self.method)
        if self._served is not None:
            self._server()
        elif self.chat_generator is not None:
            if hasattr(self.chat_generator, "warm_up"):
                self.chat_generator.warm_up()
        elif decider.needs_model:
            self._local_model()
        decider.warm_up()

    def _server(self):
        """Haystack's OpenAIChatGenerator for `server`, asking for greedy tokens with their top log-probabilities."""
        if self._server_generator is None:
            self._server_generator = self._new_server_generator()
        return self._server_generator

    def _server_for_this_loop(self):
        """`_server` for `run_async`: an async HTTP client's connections belong to the event loop that opened
        them (each `asyncio.run` starts one), so another loop gets its own generator."""
        loop = asyncio.get_running_loop()
        if getattr(self, "_async_server", None) is None or self._async_server[0] is not loop:
            self._async_server = (loop, self._new_server_generator())
        return self._async_server[1]

    def _new_server_generator(self):
        from haystack.components.generators.chat import OpenAIChatGenerator
        from haystack.utils import Secret

        generator_logger = logging.getLogger(OpenAIChatGenerator.__module__)
        if _TRUNCATION_FILTER not in generator_logger.filters:
            generator_logger.addFilter(_TRUNCATION_FILTER)
        served = self._served
        served.check_model_served()  # a model the server does not list is refused before the first question
        return OpenAIChatGenerator(
            api_key=Secret.from_token(served.api_key()), model=served.model, api_base_url=served.api_base_url,
            timeout=float(served.timeout_s), max_retries=int(served.max_retries),
            generation_kwargs={"logprobs": True, "top_logprobs": self.top_logprobs,
                               "max_tokens": self.max_new_tokens, "temperature": 0.0},
        )

    @property
    def gives_probabilities(self) -> bool:
        """Whether P(yes) is a probability rather than a parsed reply: local logits, a server's log-probabilities,
        or a chat generator asked for them (a reply without them still falls back to parsing)."""
        if self._served is not None:
            return True
        if self.chat_generator is not None:
            return asks_for_logprobs(self.chat_generator)
        return self._local.local_scoring == "logits"

    @property
    def pool_skips(self) -> dict[str, dict]:
        """Skip reports of the inputs the methods read so far, by name (TA-ARE: `yes_pool`, `no_pool`)."""
        skips: dict[str, dict] = {}
        for decider in self._deciders.values():
            skips.update(decider.input_skips)
        return skips

    def parameters_of(self, method: str | None = None) -> Any:
        """The frozen parameters the gate hands ``method`` (default: its own method), e.g. ``.artifact``."""
        return self._decider(method or self.method).parameters

    def _decider(self, method: str) -> GateDecider:
        """The gate's decider for ``method``, built and checked on first use (the run-time override included)."""
        decider = self._deciders.get(method)
        if decider is None:
            decider_class = gate_decider_class(method)
            decider = decider_class(decider_class.parameters_from(self.method_parameters), device=self._local.device)
            decider.check()
            self._deciders[method] = decider
        return decider

    def _local_model(self) -> tuple[Any, Any]:
        """The local model and its tokenizer, loaded on first use.

        :raises ValueError: when the gate names no local model (it asks a server or a chat generator).
        """
        if self._model is None or self._tokenizer is None:
            if not self.model:
                raise ValueError("The gate has no local model to load: set model=, or ask through server= or "
                                 "chat_generator=.")
            self._model, self._tokenizer = MODEL_CACHE.causal_lm(
                self.model, dtype=self._local.dtype, device=self._local.device,
                attn_implementation=self._local.attn_implementation,
            )
        return self._model, self._tokenizer

    # -- asking the model --------------------------------------------------------------------------------

    def render_for_model(self, prompt: str) -> str:
        """The chat-templated text the local model scores: the prompt as a user turn, then the answer prefix."""
        _, tokenizer = self._local_model()
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        return rendered + self.answer_prefix

    def _check_fits(self, rendered: str) -> None:
        """Refuse a prompt past the local model's context: scored anyway, P(yes) would be read from positions the
        model was never trained on, and the decision would look like any other."""
        model, tokenizer = self._local_model()
        tokens = len(tokenizer(rendered, add_special_tokens=False)["input_ids"])
        reserved = self.max_new_tokens if self._local.local_scoring == "generate" else 1
        limit = context_limit(model)
        if tokens + reserved > limit:
            raise ContextTooLongError(
                f"The gate's prompt is {tokens} tokens, but {self.model} takes at most {limit}"
                + (f" ({reserved} kept free for the generated answer)" if reserved > 1 else "")
                + ". Shorten the query (the gate asks about the question alone, not its passages).",
                prompt_tokens=tokens, limit=limit,
            )

    def ask(self, prompt: str) -> YesNoAnswer:
        """The model's yes/no answer to ``prompt``: P(yes) from a server's (or chat generator's) top
        log-probabilities, else parsed from its reply; parsed from a greedy local reply (`local_scoring="generate"`);
        or P(yes) from the local model's logits."""
        if self._served is not None or self.chat_generator is not None:
            return self._answer_from_chat(self._chat_reply(prompt))
        rendered = self.render_for_model(prompt)
        self._check_fits(rendered)
        if self._local.local_scoring == "generate":
            return self._answer_from_reply(self._generated_reply(rendered), rendered_prompt=rendered)
        model, tokenizer = self._local_model()
        score = score_yes_no(model, tokenizer, rendered, self.yes_answer, self.no_answer,
                             prefix_cache=self._prefix_cache)
        return YesNoAnswer(p_yes=score.p_yes, scoring=score.scoring, answer_mass=score.answer_mass,
                           rendered_prompt=rendered, reused_prefix_tokens=score.reused_prefix_tokens)

    async def ask_async(self, prompt: str) -> YesNoAnswer:
        """`ask` awaited: a server's (or an async chat generator's) request goes through its async client; a local
        model, or a chat generator without `run_async`, answers in a worker thread."""
        if self._served is not None:
            messages = [ChatMessage.from_user(prompt)]
            generator = self._server_for_this_loop()
            with self._asking_server():
                result = await generator.run_async(messages=messages)
            return self._answer_from_chat(self._first_served_reply(result))
        if self.chat_generator is not None and inspect.iscoroutinefunction(
                getattr(self.chat_generator, "run_async", None)):
            result = await self.chat_generator.run_async(messages=[ChatMessage.from_user(prompt)])
            replies = result.get("replies") or []
            return self._answer_from_chat(replies[0] if replies else None)
        return await asyncio.to_thread(self.ask, prompt)

    def _chat_reply(self, prompt: str) -> ChatMessage | None:
        """The first reply of the server (errors as one `ServedModelError` line) or of the chat generator."""
        messages = [ChatMessage.from_user(prompt)]
        if self._served is None:
            replies = self.chat_generator.run(messages=messages).get("replies") or []
            return replies[0] if replies else None
        generator = self._server()
        with self._asking_server():
            result = generator.run(messages=messages)
        return self._first_served_reply(result)

    @contextlib.contextmanager
    def _asking_server(self):
        """Around one request to the server: its errors as one `ServedModelError` line, and the generator's
        truncation warning (expected: the gate asks for a few tokens) dropped."""
        asking = _ASKING_SERVER.set(True)
        try:
            with served_chat_errors(self._served, hint=f"The gate asks for logprobs with top_logprobs="
                                                       f"{self.top_logprobs}; a server allowing fewer needs a lower "
                                                       "top_logprobs."):
                yield
        finally:
            _ASKING_SERVER.reset(asking)

    def _first_served_reply(self, result: Any) -> ChatMessage:
        served = self._served
        assert served is not None  # called on a served model's result only
        replies = result.get("replies") if isinstance(result, dict) else None
        if not replies:
            raise ServedModelError(f"The LLM server at {served.api_base_url} returned no choices for {served.model}; "
                                   "check that it serves chat completions for that model.")
        return replies[0]

    def _answer_from_chat(self, reply: ChatMessage | None) -> YesNoAnswer:
        """P(yes) from the reply's top log-probabilities; the parsed reply when it has none usable."""
        text = ((reply.text if reply is not None else "") or "").strip()
        logprobs = (reply.meta or {}).get("logprobs") if reply is not None else None
        score = score_yes_no_top_logprobs(logprobs, self.yes_answer, self.no_answer, self.answer_prefix)
        if score is not None:
            return YesNoAnswer(p_yes=score.p_yes, scoring=score.scoring, answer_mass=score.answer_mass, reply=text)
        with self._stats_lock:
            self.stats["reply_fallbacks"] += 1
            first = self.stats["reply_fallbacks"] == 1
        if first and self.gives_probabilities:
            why = ("neither answer was among its top log-probabilities" if logprobs
                   else "the reply carried no log-probabilities")
            logger.warning("Gate: %s, so the decision is parsed from the reply %r (counted in "
                           "stats['reply_fallbacks']; warned once).", why, text[:80])
        return self._answer_from_reply(text)

    def _generated_reply(self, rendered: str) -> str:
        """Greedy continuation of the rendered prompt (after the answer prefix), special tokens dropped."""
        import torch

        model, tokenizer = self._local_model()
        ids = tokenizer(rendered, add_special_tokens=False, return_tensors="pt")["input_ids"].to(model.device)
        with torch.inference_mode():
            output = model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=self.max_new_tokens,
                pad_token_id=tokenizer.pad_token_id, **decoding_arguments(),
            )
        return tokenizer.decode(output[0, ids.shape[1]:], skip_special_tokens=True).strip()

    def _answer_from_reply(self, text: str, rendered_prompt: str | None = None) -> YesNoAnswer:
        parsed = parse_yes_no_reply(text)
        if parsed is None:
            with self._stats_lock:
                self.stats["unparsed_replies"] += 1
            if self.on_unparsed == "error":
                raise ValueError(f"The chat generator's reply says neither yes nor no: {text[:120]!r}.")
            logger.warning("Gate reply says neither yes nor no (%r); routing to %s.", text[:80], self.on_unparsed)
        return YesNoAnswer(p_yes=None if parsed is None else float(parsed), scoring=REPLY_SCORING, reply=text,
                           rendered_prompt=rendered_prompt, route_if_unparsed=self.on_unparsed == "retrieve")

    # -- run ---------------------------------------------------------------------------------------------

    @staticmethod
    def trace_record(outputs: dict[str, Any]) -> dict[str, Any] | None:
        """What the gate decided for one question, read from its outputs (compare records it with the answer:
        ``pipeline_spec``): the route, P(yes) and the cut it was held to, the method and how it scored.

        :returns: the trace, or None when the outputs hold no decision.
        """
        decision = outputs.get("decision")
        if not isinstance(decision, dict) or "retrieve" not in decision:
            return None
        return {"technique": "gate", "decision": "retrieve" if decision["retrieve"] else "no_retrieval",
                "score": decision.get("p_yes"), "threshold": decision.get("threshold"),
                "method": decision.get("method"), "scoring": decision.get("scoring")}

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
        :param threshold: The P(yes) cut for this call (methods `threshold` and `learned`: it wins over their own or
            calibrated cut).
        :param n_yes: [Yes] demonstrations for this call (overrides TA-ARE's `n_yes`).
        :param n_no: [No] demonstrations for this call (overrides TA-ARE's `n_no`).
        :returns: `retrieve` or `no_retrieval` (the query, on the chosen output only) and `decision`.
        """
        decider, question, method = self._question(query, today, method, threshold, n_yes, n_no)
        start = time.perf_counter()
        decided = decider.decide(question, self if decider.needs_model else None)
        return self._routed(decided, question, method, start)

    @component.output_types(retrieve=str, no_retrieval=str, decision=dict)
    async def run_async(
        self,
        query: str,
        today: str | None = None,
        method: str | None = None,
        threshold: float | None = None,
        n_yes: int | None = None,
        n_no: int | None = None,
    ) -> dict[str, Any]:
        """
        `run` awaited: a served gate's request goes through OpenAI's async client (`OpenAIChatGenerator.run_async`),
        so `Pipeline.run_async` calls overlap on a batching server; a local model answers in a worker thread. The
        same inputs, checks and output as `run`.
        """
        decider, question, method = self._question(query, today, method, threshold, n_yes, n_no)
        start = time.perf_counter()
        # a decider writes its prompt and asks synchronously: it decides in a worker thread (TA-ARE embeds the
        # query there, off the event loop), each prompt it asks is answered here, awaited, and it decides again with
        # the answers at hand (writing a prompt is cheap beside asking the model)
        answers: dict[str, YesNoAnswer] = {}
        while True:
            model = _AnsweredPrompts(answers) if decider.needs_model else None
            try:
                decided = await asyncio.to_thread(decider.decide, question, model)
                break
            except _Unanswered as unanswered:
                answers[unanswered.prompt] = await self.ask_async(unanswered.prompt)
        return self._routed(decided, question, method, start)

    def _question(self, query: Any, today: str | None, method: str | None, threshold: float | None,
                  n_yes: int | None, n_no: int | None) -> tuple[GateDecider, GateQuestion, str]:
        """The run's checks; the decider, the question with this run's overrides, and the method."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"TimeAwareRetrievalGate.run needs a non-empty query string, got {query!r:.60}.")
        method = self.method if method is None else method  # "" is refused by the registry, not read as unset
        decider = self._decider(method)
        if decider.needs_logits and not self.gives_probabilities:
            raise ValueError(
                f"method={method!r} needs P(yes) (a local model's logits or a server's log-probabilities); "
                "this gate parses replies."
            )
        if decider.needs_model and self.chat_generator is None and self._served is None and not self.model:
            raise ValueError(f"method={method!r} needs a model; this gate was built without one (model=None).")
        if threshold is not None:
            threshold = float(number_between(threshold, "threshold", 0.0, 1.0))
        non_negative_int(n_yes, "n_yes", optional=True, hint=" (the method's own)")
        non_negative_int(n_no, "n_no", optional=True, hint=" (the method's own)")
        overrides = {name: value for name, value in (("n_yes", n_yes), ("n_no", n_no)) if value is not None}
        day = parse_today(today) or parse_today(self.today) or _dt.date.today()
        query = query.strip()
        question = GateQuestion(query=query, today=day, cut=threshold, overrides=overrides)
        return decider, question, method

    def _routed(self, decided: Any, question: GateQuestion, method: str, start: float) -> dict[str, Any]:
        """The output of a decision: the query on its route, the decision record, the counts updated."""
        decision = decided.as_record(method)
        decision["retrieve"] = decided.retrieve
        decision["latency_s"] = time.perf_counter() - start
        with self._stats_lock:
            self.stats["excluded_demonstrations"] += decided.excluded_demonstrations
            self.stats["decisions"] += 1
            self.stats["retrieve"] += int(decided.retrieve)
        route = "retrieve" if decided.retrieve else "no_retrieval"
        return {route: question.query, "decision": decision}

    # -- serialization -----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Haystack's default serialisation, except that the chat generator is serialised as a component (a
        `server` is a plain mapping, kept as given).

        (The default would keep a generator only through its own ``to_dict``; ``component_to_dict`` also takes one
        that relies on the default, and checks the result.) Loading needs no ``from_dict``: Haystack's
        ``default_from_dict`` rebuilds the nested generator from its ``type``.
        """
        signature = inspect.signature(type(self).__init__).parameters
        parameters = {name: getattr(self, name) for name, p in signature.items()
                      if name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD}
        parameters.update(self.method_parameters)  # flat, as the YAML gives them
        if self.chat_generator is not None:
            parameters["chat_generator"] = component_to_dict(self.chat_generator, "chat_generator")
        return default_to_dict(self, **parameters)
