"""A chat generator over a local Hugging Face causal LM held in the shared model cache."""

from __future__ import annotations

import time
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from icr2_components.errors import ContextTooLongError
from icr2_components.models.cache import MODEL_CACHE
from icr2_components.models.resolver import check_model_name


def messages_to_dicts(messages: list[ChatMessage]) -> list[dict[str, str]]:
    """Haystack chat messages -> the ``[{"role", "content"}]`` list chat templates take."""
    converted = []
    for message in messages:
        text = message.text
        if text is None:
            raise ValueError(f"LocalChatReader only reads text messages; got a {message.role.value} message without text.")
        converted.append({"role": message.role.value, "content": text})
    return converted


@component
class LocalChatReader:
    """
    Answers chat messages with a local causal LM (greedy by default), sharing the loaded model.

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
    ```
    """

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
        """
        # a local path that does not exist (a fine-tuned model not trained yet) fails here, at pipeline load,
        # naming the `icr2 train` recipe that writes it; a hub id is checked when the model is loaded
        check_model_name(model)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}.")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")
        if max_input_tokens is not None and max_input_tokens < 1:
            raise ValueError("max_input_tokens must be positive or None.")
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.do_sample = do_sample
        self.temperature = temperature
        self.dtype = dtype
        self.device = device
        self.attn_implementation = attn_implementation
        self.max_input_tokens = max_input_tokens
        self._model = None
        self._tokenizer = None

    def warm_up(self) -> None:
        if self._model is None:
            self._model, self._tokenizer = MODEL_CACHE.causal_lm(
                self.model, dtype=self.dtype, device=self.device, attn_implementation=self.attn_implementation
            )

    @property
    def tokenizer(self):
        self.warm_up()
        return self._tokenizer

    def context_limit(self) -> int:
        self.warm_up()
        if self.max_input_tokens:
            return self.max_input_tokens
        return int(getattr(self._model.config, "max_position_embeddings", 0) or 1 << 30)

    def encode(self, messages: list[ChatMessage], max_new_tokens: int | None = None):
        """Render the chat template and tokenize; raise ``ContextTooLongError`` if the prompt and the generation
        budget (``max_new_tokens``, the call's override or the init value) do not fit the context."""
        self.warm_up()
        encoded = self._tokenizer.apply_chat_template(
            messages_to_dicts(messages), add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        length = int(encoded["input_ids"].shape[1])
        budget = max_new_tokens or self.max_new_tokens
        limit = self.context_limit() - budget
        if length > limit:
            raise ContextTooLongError(
                f"The prompt has {length} tokens but {self.model} accepts {limit} "
                f"({self.context_limit()} context minus max_new_tokens={budget}). "
                "Shorten the context (a smaller budget in the corpus builder, or a RAP filter).",
                prompt_tokens=length, limit=limit,
            )
        return encoded

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], max_new_tokens: int | None = None) -> dict[str, Any]:
        """
        :param messages: The conversation; the last message is usually the user's prompt.
        :param max_new_tokens: Overrides the init value for this call.
        :returns: `replies`: one assistant message, with `prompt_tokens`, `completion_tokens` and
            `latency_s` in its meta.
        """
        if not messages:
            raise ValueError("LocalChatReader.run needs at least one message.")
        import torch

        self.warm_up()
        encoded = self.encode(messages, max_new_tokens).to(self._model.device)
        budget = max_new_tokens or self.max_new_tokens
        kwargs: dict[str, Any] = {"max_new_tokens": budget, "do_sample": self.do_sample,
                                  "pad_token_id": self._tokenizer.pad_token_id}
        if self.do_sample:
            kwargs["temperature"] = self.temperature
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        start = time.perf_counter()
        with torch.inference_mode():
            output = self._model.generate(**encoded, **kwargs)
        prompt_tokens = int(encoded["input_ids"].shape[1])
        new_tokens = output[0, prompt_tokens:]
        text = self._tokenizer.decode(new_tokens, skip_special_tokens=True).strip()
        meta = {
            "model": self.model,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": int(new_tokens.shape[0]),
            "latency_s": time.perf_counter() - start,
        }
        return {"replies": [ChatMessage.from_assistant(text, meta=meta)]}

    def loading_settings(self) -> dict[str, Any]:
        """The init parameters every reader shares (model, budget, loading): subclasses serialise these plus
        their own technique's."""
        return {"model": self.model, "max_new_tokens": self.max_new_tokens, "dtype": self.dtype, "device": self.device,
                "attn_implementation": self.attn_implementation, "max_input_tokens": self.max_input_tokens}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, **self.loading_settings(), do_sample=self.do_sample, temperature=self.temperature)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LocalChatReader":
        return default_from_dict(cls, data)
