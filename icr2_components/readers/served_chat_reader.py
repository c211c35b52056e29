"""A reader whose model runs behind an OpenAI-compatible server (vLLM, llama.cpp, Ollama, TGI, OpenAI)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from haystack import component
from haystack.dataclasses import ChatMessage

from icr2_components.errors import ContextTooLongError
from icr2_components.models.local_chat_model import check_max_new_tokens
from icr2_components.models.served_model import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_S,
    ServedModel,
    ServedModelError,
    served_chat_errors,
)
from icr2_components.models.token_counting import PassageTokenCounter
from icr2_components.parameters import checked, message_list
from icr2_components.strict_mapping import NonNegativeNumber

if TYPE_CHECKING:
    from haystack.components.generators.chat import OpenAIChatGenerator

PER_MESSAGE_TOKENS = 8
"""Tokens a chat template adds around each message (role markers, separators): counted before sending."""
TEMPLATE_MARGIN_TOKENS = 32
"""Tokens a chat template may add once (SmolLM2's adds a 20-token system turn when none is given)."""

class _TruncationNotice(logging.Filter):
    """Drops the warning Haystack's OpenAIChatGenerator logs for every answer cut at its token budget: the reply's
    ``finish_reason`` ("length") says it, and reports count it (one WARNING line per answer broke progress bars)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "truncated before reaching a natural stopping point" not in str(record.msg)


_OPENAI_GENERATOR_LOGGER = "haystack.components.generators.chat.openai"
if not any(isinstance(f, _TruncationNotice) for f in logging.getLogger(_OPENAI_GENERATOR_LOGGER).filters):
    logging.getLogger(_OPENAI_GENERATOR_LOGGER).addFilter(_TruncationNotice())


@component
class ServedChatReader:
    """
    Answers chat messages with a model behind an OpenAI-compatible server, through Haystack's own
    `OpenAIChatGenerator` (the HTTP client is OpenAI's; this component adds what a reader of this library promises).

    The black-box reader of ICR2's pipelines (Qiu et al., 2025, "Eliciting In-context Retrieval and Reasoning for
    Long-context Large Language Models", https://arxiv.org/abs/2501.08248): the same `messages` in and `replies`
    out as `LocalChatReader`, so any black-box pipeline (closed-book, vanilla, corpus-in-context, query-aware,
    reordered, reranked, oracle, adaptive, multi-agent, prompting) runs on vLLM or TGI on GPUs, or llama.cpp or
    Ollama on CPUs, by switching the backend (`icr2 compare --backend backends/llama_cpp_server.yaml`) rather
    than editing YAML. Beyond the generator it:

    * checks the prompt against the served model's context before sending it, counting with the served model's
      tokenizer (the server's tokenize endpoint, or a named tokenizer), and turns the server's own context
      refusal into the same `ContextTooLongError` (`icr2 serve` answers 413);
    * bounds every call (`timeout_s`, `max_retries`) and turns a server that is down, slow, or answering something
      that is not a chat completion into one line naming the server and what to do (`ServedModelError`);
    * refuses, at warm-up, a `model` the server does not list at `/v1/models`, naming the models it serves, and
      records in each reply's meta the model the server reports answering with (`model`);
    * decodes greedily by default and puts `prompt_tokens`, `completion_tokens` and `latency_s` in the reply's meta.

    White-box techniques (RAP, CAD/ACD/COIECD, PH3, the retrieval-head ranker) need the weights and refuse to load
    beside this reader.

    Usage example:
    ```python
    from haystack.dataclasses import ChatMessage
    from icr2_components.readers import ServedChatReader

    # bash scripts/llama_server.sh start   (llama.cpp's OpenAI-compatible server, SmolLM2 GGUF, port 8089)
    reader = ServedChatReader(api_base_url="http://127.0.0.1:8089/v1", model="smollm2-135m-instruct",
                              max_new_tokens=32, context_length=8192)
    result = reader.run(messages=[ChatMessage.from_user("What is the capital of France?")])
    print(result["replies"][0].text, result["replies"][0].meta["prompt_tokens"])
    ```
    """

    black_box: ClassVar[bool] = True
    """Marks a reader that sees only tokens: white-box components refuse to share a pipeline with it."""

    unbatched_because: ClassVar[str] = (
        "an OpenAI chat completion carries one conversation per request (`n` samples one prompt several times; the "
        "Batch API answers files within hours), so a batch would be N requests anyway: a batching server (vLLM, "
        "TGI, llama-server with --parallel) batches requests that arrive together, which concurrent requests give"
    )
    """Why `icr2 compare --batch-size` sends this reader's prompts one request each (no `run_batch`)."""

    def __init__(
        self,
        api_base_url: str,
        model: str,
        api_key_env: str | None = None,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        context_length: int | None = None,
        tokenizer: str | None = "server",
        generation_kwargs: dict[str, Any] | None = None,
    ) -> None:
        """
        :param api_base_url: The server's API root, ending in `/v1` (e.g. `http://127.0.0.1:8089/v1`).
        :param model: The served model's name (as `/v1/models` lists it).
        :param api_key_env: Environment variable with the API key (OpenAI: `OPENAI_API_KEY`); None sends a
            placeholder, which local servers ignore (named but unset: the placeholder too, with a warning naming
            the variable).
        :param max_new_tokens: Most tokens generated per reply (sent as `max_tokens`).
        :param temperature: 0 decodes greedily (the default, as `LocalChatReader`).
        :param timeout_s: Seconds one request may take.
        :param max_retries: Retries after a connection error, time-out, 429 or 5xx.
        :param context_length: The served model's context; None asks the server (vLLM, llama-server say it).
        :param tokenizer: `server` (the server's tokenize endpoint), a local tokenizer name for servers without one
            (Ollama, OpenAI), or None to skip the check before sending (the server's refusal still maps to
            `ContextTooLongError`).
        :param generation_kwargs: Further chat-completion arguments (e.g. `{"seed": 0}`, `{"stop": ["\\n"]}`).
        """
        check_max_new_tokens(max_new_tokens)
        checked(temperature, NonNegativeNumber, "temperature", ">= 0 (0: greedy)")  # NaN, inf and bools refused
        if generation_kwargs is not None and not isinstance(generation_kwargs, dict):
            raise ValueError(
                f"generation_kwargs must be a mapping of chat-completion arguments, got {generation_kwargs!r}."
            )
        reserved = {"max_tokens", "max_completion_tokens", "temperature", "stream"} & set(generation_kwargs or {})
        if reserved:
            raise ValueError(f"generation_kwargs may not set {sorted(reserved)}: use max_new_tokens and temperature.")
        self.served = ServedModel(api_base_url=api_base_url, model=model, api_key_env=api_key_env, timeout_s=timeout_s,
                                  max_retries=max_retries, context_length=context_length,
                                  tokenizer=tokenizer or "server")
        self.api_base_url = api_base_url
        self.model = model
        self.api_key_env = api_key_env
        self.max_new_tokens = max_new_tokens
        self.temperature = float(temperature)
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.context_length = context_length
        self.tokenizer = tokenizer
        self.generation_kwargs = dict(generation_kwargs or {})
        self._generator: OpenAIChatGenerator | None = None
        self._model_checked = False
        self._counter: PassageTokenCounter | None = None
        self._async_generator = None
        self._async_loop: asyncio.AbstractEventLoop | None = None

    def warm_up(self) -> None:
        """Check that the server serves `model` (where it lists models at `/v1/models`) and build the client.

        :raises ServedModelError: the server lists models and `model` is not one of them (the message names them).
        """
        if not self._model_checked:
            # a server not reachable now is checked again at the next call; its chat request reports it first
            self._model_checked = self.served.check_model_served()
        self._warm_up_clients()

    def _warm_up_clients(self) -> None:
        if self._generator is None:
            self._generator = self._new_generator()
        if self._counter is None and self.tokenizer:
            self._counter = PassageTokenCounter.for_model(self.served.tokenizer_spec())

    def prompt_tokens(self, messages: list[ChatMessage]) -> int:
        """The prompt's tokens as counted before sending (an upper estimate: the template is the server's): each
        message's text plus `PER_MESSAGE_TOKENS`, plus `TEMPLATE_MARGIN_TOKENS` once."""
        self.warm_up()
        assert self._counter is not None
        texts = [m.text or "" for m in messages]
        return self._prompt_total(self._counter.count_many_texts(texts))

    async def prompt_tokens_async(self, messages: list[ChatMessage]) -> int:
        """`prompt_tokens`, the server's tokenize requests awaited together (a local tokenizer counts in place)."""
        from icr2_components.models.served_model import ServedTokenizer

        self._warm_up_clients()
        assert self._counter is not None
        texts = [m.text or "" for m in messages]
        tokenizer = self._counter.tokenizer
        if isinstance(tokenizer, ServedTokenizer):
            return self._prompt_total(await tokenizer.count_many_async(texts))
        return self._prompt_total(self._counter.count_many_texts(texts))

    @staticmethod
    def _prompt_total(counts: list[int]) -> int:
        return sum(counts) + PER_MESSAGE_TOKENS * len(counts) + TEMPLATE_MARGIN_TOKENS

    def _check_fits(self, messages: list[ChatMessage], max_new_tokens: int) -> None:
        if not self.tokenizer:
            return
        context = self.served.resolved_context_length()
        if context:
            self._refuse_past(context, self.prompt_tokens(messages), max_new_tokens)

    async def _check_fits_async(self, messages: list[ChatMessage], max_new_tokens: int) -> None:
        if not self.tokenizer:
            return
        # stated, or asked of the server once per process (cached): a thread for that one request
        context = self.context_length or await asyncio.to_thread(self.served.resolved_context_length)
        if context:
            self._refuse_past(context, await self.prompt_tokens_async(messages), max_new_tokens)

    def _refuse_past(self, context: int, length: int, max_new_tokens: int) -> None:
        limit = context - max_new_tokens
        if length > limit:
            raise ContextTooLongError(
                f"The prompt has about {length} tokens but {self.model} at {self.api_base_url} accepts {limit} "
                f"({context} context minus max_new_tokens={max_new_tokens}). "
                "Shorten the context (a smaller budget in the corpus builder).",
                prompt_tokens=length, limit=limit,
            )

    def _request(self, messages: list[ChatMessage], max_new_tokens: int | None) -> tuple[int, dict[str, Any]]:
        """The checked token budget and the chat-completion arguments of one call (sync and async alike)."""
        message_list(messages)
        # 0 is a value given (and refused), not "use the init value"
        budget = check_max_new_tokens(self.max_new_tokens if max_new_tokens is None else max_new_tokens)
        return budget, {**self.generation_kwargs, "max_tokens": budget, "temperature": self.temperature}

    def _reply(self, result: Any, latency: float) -> dict[str, Any]:
        """The component's output from the generator's: one reply, its token counts and latency in the meta."""
        replies = result.get("replies") if isinstance(result, dict) else None
        if not replies:
            raise ServedModelError(f"The LLM server at {self.api_base_url} returned no choices for {self.model}; "
                                   "check that it serves chat completions for that model.")
        reply = replies[0]
        meta = dict(reply.meta or {})
        usage = meta.get("usage") or {}
        meta.update(model=meta.get("model") or self.model, prompt_tokens=usage.get("prompt_tokens"),
                    completion_tokens=usage.get("completion_tokens"), latency_s=latency)
        return {"replies": [ChatMessage.from_assistant((reply.text or "").strip(), meta=meta)]}

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], max_new_tokens: int | None = None,
            streaming_callback: Callable | None = None) -> dict[str, Any]:
        """
        :param messages: The conversation; the last message is usually the user's prompt.
        :param max_new_tokens: Overrides the init value for this call.
        :param streaming_callback: Called with each `StreamingChunk` as the server streams the reply.
        :returns: `replies`: one assistant message, with `model`, `prompt_tokens`, `completion_tokens`,
            `latency_s` and `finish_reason` in its meta.
        :raises ContextTooLongError: the prompt does not fit the served model's context.
        :raises ServedModelError: the server is down, timed out, or answered something that is not a completion.
        """
        budget, kwargs = self._request(messages, max_new_tokens)
        self.warm_up()
        self._check_fits(messages, budget)
        start = time.perf_counter()
        result = self._call(messages, kwargs, streaming_callback)
        return self._reply(result, time.perf_counter() - start)

    @component.output_types(replies=list[ChatMessage])
    async def run_async(self, messages: list[ChatMessage], max_new_tokens: int | None = None,
                        streaming_callback: Callable | None = None) -> dict[str, Any]:
        """
        `run` awaited: the request goes through OpenAI's async client (Haystack's `OpenAIChatGenerator.run_async`),
        so `Pipeline.run_async` calls overlap on a batching server (vLLM, TGI, `llama-server --parallel N`). The
        same checks, retries, time-out, errors and output as `run`.

        :param messages: The conversation; the last message is usually the user's prompt.
        :param max_new_tokens: Overrides the init value for this call.
        :param streaming_callback: Called with each `StreamingChunk` (an async callback; a sync one runs on the
            event loop).
        :returns: `replies`: one assistant message, with the same meta as `run`.
        :raises ContextTooLongError: the prompt does not fit the served model's context.
        :raises ServedModelError: the server is down, timed out, or answered something that is not a completion.
        """
        budget, kwargs = self._request(messages, max_new_tokens)
        if not self._model_checked:  # the model check's request, off the event loop
            self._model_checked = await asyncio.to_thread(self.served.check_model_served)
        self._warm_up_clients()
        await self._check_fits_async(messages, budget)
        generator = self._generator_for_this_loop()
        start = time.perf_counter()
        with served_chat_errors(self.served):
            result = await generator.run_async(messages=messages, generation_kwargs=kwargs,
                                               streaming_callback=streaming_callback)
        return self._reply(result, time.perf_counter() - start)

    def _generator_for_this_loop(self):
        """An `OpenAIChatGenerator` whose async client belongs to the running event loop: an async HTTP client's
        connections cannot move to another loop (each `asyncio.run` starts one), so another loop gets its own."""
        loop = asyncio.get_running_loop()
        if self._async_generator is None or self._async_loop is not loop:
            self._async_generator, self._async_loop = self._new_generator(), loop
        return self._async_generator

    def _new_generator(self) -> OpenAIChatGenerator:
        from haystack.components.generators.chat import OpenAIChatGenerator
        from haystack.utils import Secret

        return OpenAIChatGenerator(
            api_key=Secret.from_token(self.served.api_key()), model=self.model, api_base_url=self.api_base_url,
            timeout=float(self.timeout_s), max_retries=int(self.max_retries),
        )

    def _call(self, messages: list[ChatMessage], kwargs: dict[str, Any], streaming_callback: Callable | None) -> dict:
        if self._generator is None:
            self._generator = self._new_generator()
        with served_chat_errors(self.served):
            return self._generator.run(messages=messages, generation_kwargs=kwargs,
                                       streaming_callback=streaming_callback)
