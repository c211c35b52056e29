"""A causal LM from the shared model cache used as a chat model: what every local reader needs of its model."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from haystack.dataclasses import ChatMessage

from icr2_components.errors import ContextTooLongError
from icr2_components.extras import require_extra
from icr2_components.models.cache import MODEL_CACHE, check_dtype_device
from icr2_components.models.chat_messages import messages_to_dicts
from icr2_components.models.generation_prefix_cache import GenerationPrefixCache
from icr2_components.models.generation_settings import decoding_arguments
from icr2_components.models.introspection import context_limit
from icr2_components.models.resolver import check_model_name
from icr2_components.parameters import positive_int

logger = logging.getLogger(__name__)


def check_max_new_tokens(max_new_tokens: int) -> int:
    """A generation budget, at init and per call: a positive integer (0 is refused, never read as "not given")."""
    return positive_int(max_new_tokens, "max_new_tokens")


class LocalChatModel:
    """
    One local causal LM seen as a chat model: loading (from `MODEL_CACHE`), chat-template encoding with the
    context check, and generation of one reply with its meta.

    Readers hold one of these instead of inheriting from each other, so that each reader states only its own
    technique; the model itself is the cache's copy, shared with every other component naming it.

    Usage example:
    ```python
    from haystack.dataclasses import ChatMessage
    from icr2_components.models.local_chat_model import LocalChatModel

    chat_model = LocalChatModel("smollm2-135m-instruct", dtype="float32", device="cpu")
    reply = chat_model.reply([ChatMessage.from_user("What is the capital of France?")], max_new_tokens=8)
    print(reply.text, reply.meta["completion_tokens"])
    ```
    """

    def __init__(
        self,
        name: str,
        dtype: str = "auto",
        device: str | None = None,
        attn_implementation: str | None = "sdpa",
        max_input_tokens: int | None = None,
    ) -> None:
        """
        :param name: Hugging Face id, local path or bundled alias.
        :param dtype: `auto`, `float32`, `float16` or `bfloat16`.
        :param device: `cpu`, `cuda`, `cuda:1`...; the best available by default.
        :param attn_implementation: `sdpa`, `eager` or `flash_attention_2`.
        :param max_input_tokens: Refuse prompts longer than this (default: the model's context length).
        """
        # a local path that does not exist (a fine-tuned model not trained yet) fails here, at pipeline load,
        # naming the `icr2 train` recipe that writes it; a hub id is checked when the model is loaded
        require_extra("local", f"The in-process model {name!r}", ("torch", "transformers"))
        check_model_name(name)
        if max_input_tokens is not None and max_input_tokens < 1:
            raise ValueError(f"max_input_tokens must be a positive integer or None, got {max_input_tokens!r}.")
        check_dtype_device(dtype, device)
        self.name = name
        self.dtype = dtype
        self.device = device
        self.attn_implementation = attn_implementation
        self.max_input_tokens = max_input_tokens
        self._model = None
        self._tokenizer = None

    def load(self) -> None:
        """Take the model and tokenizer from the shared cache (loading them on first use)."""
        if self._model is None:
            self._model, self._tokenizer = MODEL_CACHE.causal_lm(
                self.name, dtype=self.dtype, device=self.device, attn_implementation=self.attn_implementation
            )

    @property
    def model(self):
        """The loaded Hugging Face model (the cache's shared copy)."""
        self.load()
        return self._model

    @property
    def tokenizer(self):
        self.load()
        return self._tokenizer

    def context_limit(self) -> int:
        return context_limit(self.model, self.max_input_tokens)

    def eos_token_ids(self) -> set[int]:
        """The token ids that end a reply: the generation config's, else the tokenizer's."""
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        return set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}

    def encode(self, messages: list[ChatMessage], max_new_tokens: int):
        """Render the chat template and tokenize; raise ``ContextTooLongError`` if the prompt and the generation
        budget ``max_new_tokens`` do not fit the context."""
        check_max_new_tokens(max_new_tokens)
        encoded = self.tokenizer.apply_chat_template(
            messages_to_dicts(messages), add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        length = int(encoded["input_ids"].shape[1])
        context = self.context_limit()
        limit = context - max_new_tokens
        if length > limit:
            raise ContextTooLongError(
                f"The prompt has {length} tokens but {self.name} accepts {limit} "
                f"({context} context minus max_new_tokens={max_new_tokens}). "
                "Shorten the context (a smaller budget in the corpus builder, or a RAP filter).",
                prompt_tokens=length, limit=limit,
            )
        return encoded

    def reply(
        self, messages: list[ChatMessage], max_new_tokens: int, do_sample: bool = False, temperature: float = 1.0,
        on_text: Callable[[str], None] | None = None, prefix_cache: GenerationPrefixCache | None = None,
    ) -> ChatMessage:
        """One assistant reply to ``messages`` (greedy unless ``do_sample``), with `model`, `prompt_tokens`,
        `completion_tokens`, `finish_reason` (`stop`: the model ended it; `length`: the budget did) and
        `latency_s` in its meta.

        ``on_text`` receives the reply's text while it is generated, in pieces whose concatenation is exactly
        the returned text (``ReplyStreamer``); the generation itself is the same, with or without it.
        ``prefix_cache`` starts the generation from the last prompt's keys and values where the two prompts share
        a prefix (:class:`~icr2_components.models.generation_prefix_cache.GenerationPrefixCache`); `reused_tokens`
        in the meta says how many prompt tokens it did not run again.
        """
        import torch

        encoded = self.encode(messages, max_new_tokens).to(self.model.device)
        arguments: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": self.tokenizer.pad_token_id,
                                     **decoding_arguments(do_sample, temperature)}
        if on_text is not None:
            arguments["streamer"] = ReplyStreamer(self.tokenizer, on_text)
        start = time.perf_counter()
        reused = 0
        with torch.inference_mode():
            if prefix_cache is None:
                output = self.model.generate(**encoded, **arguments)
            else:
                output, reused = prefix_cache.generate(self.model, encoded["input_ids"], encoded.get("attention_mask"),
                                                       **arguments)
        prompt_tokens = int(encoded["input_ids"].shape[1])
        new_tokens = output[0, prompt_tokens:]
        text = reply_text(self.tokenizer, new_tokens.tolist())
        ended = new_tokens.shape[0] > 0 and int(new_tokens[-1]) in self.eos_token_ids()
        meta = {
            "model": self.name,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": int(new_tokens.shape[0]),
            "finish_reason": "length" if not ended and new_tokens.shape[0] >= max_new_tokens else "stop",
            "latency_s": time.perf_counter() - start,
        }
        if prefix_cache is not None:
            meta["reused_tokens"] = reused
        return ChatMessage.from_assistant(text, meta=meta)

    def reply_batch(
        self, conversations: list[list[ChatMessage]], max_new_tokens: int, do_sample: bool = False,
        temperature: float = 1.0,
    ) -> list[ChatMessage]:
        """One assistant reply per conversation, generated in one ``generate`` call: the prompts are padded on
        the left (the pad token, masked out; position ids follow the attention mask), so every prompt's last
        token sits at the same position and greedy decoding in float32 gives the replies :meth:`reply` gives one
        at a time (a test compares them on real prompts). In bfloat16/float16 the rounding depends on the batch's
        shape, so a near tie can go the other way (``bench/reader_batching.py`` counts how often). A reply ends at
        its first end token; the batch runs until every reply has ended or the budget is spent. Each reply's meta
        is :meth:`reply`'s, its own `prompt_tokens` (without padding), `latency_s` the whole batch's, and
        `batch_size`.

        Every prompt is checked against the context first (``ContextTooLongError`` names the first too long).
        """
        import torch

        if not conversations:
            return []
        encoded = [self.encode(messages, max_new_tokens)["input_ids"][0] for messages in conversations]
        width = max(int(ids.shape[0]) for ids in encoded)
        pad = self.tokenizer.pad_token_id
        # padded here rather than by the tokenizer: the shared tokenizer's padding side stays as it is
        input_ids = torch.full((len(encoded), width), pad, dtype=encoded[0].dtype)
        attention_mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, width - ids.shape[0]:] = ids
            attention_mask[row, width - ids.shape[0]:] = 1
        arguments: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": pad,
                                     **decoding_arguments(do_sample, temperature)}
        start = time.perf_counter()
        with torch.inference_mode():
            output = self.model.generate(input_ids=input_ids.to(self.model.device),
                                         attention_mask=attention_mask.to(self.model.device), **arguments)
        latency = time.perf_counter() - start
        eos = self.eos_token_ids()
        replies = []
        for row, ids in enumerate(encoded):
            generated = output[row, width:].tolist()
            # a finished row is filled with the pad token (often the end token itself) until the batch ends
            end = next((i for i, token in enumerate(generated) if token in eos), None)
            new_tokens = generated if end is None else generated[: end + 1]
            meta = {
                "model": self.name,
                "prompt_tokens": int(ids.shape[0]),
                "completion_tokens": len(new_tokens),
                "finish_reason": "stop" if end is not None or len(new_tokens) < max_new_tokens else "length",
                "latency_s": latency,
                "batch_size": len(encoded),
            }
            replies.append(ChatMessage.from_assistant(reply_text(self.tokenizer, new_tokens), meta=meta))
        return replies


def reply_text(tokenizer, token_ids: list[int]) -> str:
    """The text of generated tokens as a reply: decoded without special tokens, surrounding whitespace removed."""
    return tokenizer.decode(token_ids, skip_special_tokens=True).strip()


class ReplyStreamer:
    """A transformers ``generate`` streamer handing the reply's text to ``on_text`` as tokens arrive.

    Each step decodes the tokens so far as ``reply_text`` does and passes on what is new; whitespace at the end
    is held back until text follows it, and a step that ends inside a multi-byte character waits for the next,
    so that the pieces concatenate to exactly the final reply text (``end`` passes on the rest).

    Usage example:
    ```python
    pieces = []
    model.generate(**encoded, max_new_tokens=16, streamer=ReplyStreamer(tokenizer, pieces.append))
    ```
    """

    def __init__(self, tokenizer, on_text: Callable[[str], None]) -> None:
        self.tokenizer = tokenizer
        self.on_text = on_text
        self.token_ids: list[int] = []
        self.sent = ""
        self._prompt_skipped = False

    def put(self, value) -> None:
        if not self._prompt_skipped:  # generate puts the prompt first
            self._prompt_skipped = True
            return
        self.token_ids.extend(int(token) for token in value.reshape(-1).tolist())
        text = reply_text(self.tokenizer, self.token_ids)
        if not text.endswith("\ufffd"):
            self._pass_on(text)

    def end(self) -> None:
        text = reply_text(self.tokenizer, self.token_ids)
        self._pass_on(text)
        if text != self.sent:  # a tokenizer whose decoding of a prefix changed later: said, never silent
            logger.warning("streamed reply text %r differs from the final text %r", self.sent, text)

    def _pass_on(self, text: str) -> None:
        if len(text) > len(self.sent) and text.startswith(self.sent):
            piece, self.sent = text[len(self.sent):], text
            self.on_text(piece)
