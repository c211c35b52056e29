"""A chat generator over a local Hugging Face causal LM held in the shared model cache."""

from __future__ import annotations

from typing import Any, ClassVar

from haystack import component
from haystack.dataclasses import ChatMessage, ComponentInfo, StreamingChunk, SyncStreamingCallbackT

from icr2_components.models.generation_prefix_cache import GenerationPrefixCache
from icr2_components.models.local_chat_model import LocalChatModel, check_max_new_tokens
from icr2_components.parameters import boolean, message_list, override, positive_number


@component
class LocalChatReader:
    """
    Answers chat messages with a local causal LM (greedy by default), sharing the loaded model.

    The reader of ICR2's pipelines (Qiu et al., 2025, "Eliciting In-context Retrieval and Reasoning for
    Long-context Large Language Models", https://arxiv.org/abs/2501.08248): it answers from the corpus-in-context
    prompt, and a model fine-tuned by `icr2 train` (SFT-DA/RTA/CCI) loads into it by path.

    Unlike `HuggingFaceLocalChatGenerator`, the model comes from the process-wide `MODEL_CACHE`, so a RAP
    filter, a gate and this reader naming the same model hold one copy of its weights. Any Hugging Face id,
    local path or bundled alias (`smollm2-135m-instruct`) is accepted.

    Usage example:
    ```python
    from haystack.dataclasses import ChatMessage
    from icr2_components.readers import LocalChatReader

    reader = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=32)
    reader.warm_up()
    result = reader.run(messages=[ChatMessage.from_user("What is the capital of France?")])
    print(result["replies"][0].text)

    # a batch of conversations in one generate call (left-padded): the same greedy replies as one at a time
    replies = reader.run_batch([[ChatMessage.from_user("Capital of Peru?")], [ChatMessage.from_user("2 + 2?")]])

    # streamed: the callback gets the reply as it is generated (Haystack's StreamingChunk), then a last chunk
    # with no text and the `finish_reason`; the pieces concatenate to exactly the reply's text
    reader.run(messages=[ChatMessage.from_user("Name three colours.")],
               streaming_callback=lambda chunk: print(chunk.content, end="", flush=True))

    # prompts that share their start (the same documents with the gold one moved, as in Lost in the Middle's
    # position sweep): each reply starts from the last prompt's keys and values for the shared prefix
    reader = LocalChatReader(model="smollm2-135m-instruct", dtype="float32", reuse_prompt_prefix=True)
    ```
    """

    backend_role: ClassVar[str] = "chat_reader"
    """Under a backend (`icr2_components.backends`) the kind decides what answers: a served kind puts a
    `ServedChatReader` in its place (same answer budget, greedy unless sampling), a local one names the model."""

    def __init__(
        self,
        model: str = "smollm2-135m-instruct",
        max_new_tokens: int = 64,
        do_sample: bool = False,
        temperature: float = 1.0,
        dtype: str = "auto",
        device: str | None = None,
        attn_implementation: str | None = "sdpa",
        max_input_tokens: int | None = None,
        reuse_prompt_prefix: bool = False,
    ) -> None:
        """
        :param model: Hugging Face id, local path or bundled alias.
        :param max_new_tokens: Most tokens generated per reply.
        :param do_sample: Sample instead of greedy decoding.
        :param temperature: Sampling temperature (only with `do_sample`).
        :param dtype: `auto`, `float32`, `float16` or `bfloat16`.
        :param device: `cpu`, `cuda`, `cuda:1`...; the best available by default.
        :param attn_implementation: `sdpa`, `eager` or `flash_attention_2`.
        :param max_input_tokens: Refuse prompts longer than this (default: the model's context length).
        :param reuse_prompt_prefix: Keep the last prompt's key/value cache and run only what follows the prefix
            the next prompt shares with it (`GenerationPrefixCache`; the meta's `reused_tokens` says how much).
            In float32 greedy replies are those of the whole prompt (tested on real prompts); in half precision
            a near tie may go the other way. Memory: one prompt's keys and values. A speed setting: it is left out
            of `icr2 compare`'s pipeline hash, and `icr2 compare --reuse-prompt-prefix` turns it on.
        :raises ValueError: a parameter out of range or of the wrong type.
        """
        check_max_new_tokens(max_new_tokens)
        boolean(do_sample, "do_sample")
        boolean(reuse_prompt_prefix, "reuse_prompt_prefix")
        positive_number(temperature, "temperature")
        self.chat_model = LocalChatModel(model, dtype=dtype, device=device, attn_implementation=attn_implementation,
                                         max_input_tokens=max_input_tokens)
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.do_sample = do_sample
        self.temperature = temperature
        self.dtype = dtype
        self.device = device
        self.attn_implementation = attn_implementation
        self.max_input_tokens = max_input_tokens
        self.reuse_prompt_prefix = reuse_prompt_prefix
        self._prefix_cache = GenerationPrefixCache() if reuse_prompt_prefix else None

    def warm_up(self) -> None:
        self.chat_model.load()

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], max_new_tokens: int | None = None,
            streaming_callback: SyncStreamingCallbackT | None = None) -> dict[str, Any]:
        """
        :param messages: The conversation; the last message is usually the user's prompt.
        :param max_new_tokens: Overrides the init value for this call (checked as it is: a positive integer).
        :param streaming_callback: Called with each piece of the reply as it is generated (a `StreamingChunk`,
            `index` 0, `start` on the first), then once with empty content, the `finish_reason` and the usage in
            its meta. Only at run time: a callable is no init parameter, so the component serialises as before.
        :returns: `replies`: one assistant message, with `model`, `prompt_tokens`, `completion_tokens`,
            `finish_reason` and `latency_s` in its meta (and `reused_tokens` with `reuse_prompt_prefix`).
        :raises ValueError: no messages, or `max_new_tokens` not a positive integer.
        :raises ContextTooLongError: the prompt does not fit the model's context.
        """
        message_list(messages)
        on_text = None
        if streaming_callback is not None:
            if not callable(streaming_callback):
                raise TypeError(f"streaming_callback must be callable, got {type(streaming_callback).__name__}.")
            info = ComponentInfo.from_component(self)
            started = False

            def on_text(piece: str) -> None:
                nonlocal started
                streaming_callback(StreamingChunk(content=piece, index=0, start=not started, component_info=info))
                started = True

        budget = check_max_new_tokens(override(max_new_tokens, self.max_new_tokens))
        reply = self.chat_model.reply(messages, budget, do_sample=self.do_sample, temperature=self.temperature,
                                      on_text=on_text, prefix_cache=self._prefix_cache)
        if streaming_callback is not None:
            usage = {key: reply.meta[key] for key in ("model", "prompt_tokens", "completion_tokens")}
            streaming_callback(StreamingChunk(content="", meta=usage, component_info=info,
                                              finish_reason=reply.meta["finish_reason"]))
        return {"replies": [reply]}

    def run_batch(self, conversations: list[list[ChatMessage]], max_new_tokens: int | None = None) -> list[ChatMessage]:
        """One reply per conversation, generated together in one ``generate`` call (``LocalChatModel.reply_batch``:
        left padding with an attention mask). In float32 the greedy replies equal :meth:`run`'s one at a time; in
        bfloat16 or float16 a padded batch rounds differently, and some replies differ (:meth:`batch_caveat`).
        ``icr2 compare --batch-size`` uses it for pipelines whose reader is the last step. Not a pipeline socket: a
        pipeline answers one query per run.

        :raises ContextTooLongError: a prompt does not fit the context (the batch is not generated).
        """
        if not conversations or any(not messages for messages in conversations):
            raise ValueError("LocalChatReader.run_batch needs conversations of at least one message each.")
        budget = check_max_new_tokens(override(max_new_tokens, self.max_new_tokens))
        return self.chat_model.reply_batch(list(conversations), budget,
                                           do_sample=self.do_sample, temperature=self.temperature)

    def batch_caveat(self) -> str | None:
        """None when :meth:`run_batch` gives :meth:`run`'s greedy replies exactly (the model runs in float32);
        otherwise why it may not. Half precision rounds a left-padded batch's matmuls differently from a single
        prompt's, and greedy decoding amplifies a near tie: `bench/reader_batching.py` measured 6 to 10 of 32
        bfloat16 replies different from batch size 1 (the same answer-match count), and 32 of 32 equal in float32.
        """
        from icr2_components.models.cache import default_device, resolve_torch_dtype

        # the dtype the model loads in, without loading it (a model that cannot load fails in the batch itself)
        dtype = resolve_torch_dtype(self.dtype, self.device or default_device())
        if dtype.is_floating_point and dtype.itemsize >= 4:
            return None
        return (f"the model runs in {str(dtype).removeprefix('torch.')}, where a padded batch rounds differently "
                "from one prompt: some greedy replies may differ from batch size 1 (use dtype float32 for identical "
                "replies)")
