"""``kind: served``: the model is behind an OpenAI-compatible server (vLLM, llama.cpp, Ollama, TGI, OpenAI), the
``served_model:`` keys of :class:`~icr2_components.models.served_model.ServedModel`. Only generated tokens and
their log-probabilities come back (no weights); budgets count with the server's tokenize endpoint or the named
tokenizer. A chat reader becomes a ``ServedChatReader``; the gate asks the server for P(yes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from icr2_components.backends.kind import BackendKind, register_backend_kind
from icr2_components.errors import UserInputError
from icr2_components.models.served_model import ServedModel

SERVED_READER = "icr2_components.readers.served_chat_reader.ServedChatReader"
SERVER_KEYS = ("api_base_url", "model", "api_key_env", "timeout_s", "max_retries")
"""The `server` keys a served backend hands the gate."""


@dataclass(frozen=True)
class ServedSettings:
    served_model: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.served_model, (dict, ServedModel)):
            raise ValueError("kind: served needs a `served_model:` mapping (api_base_url, model, ...).")
        if isinstance(self.served_model, dict):
            try:
                object.__setattr__(self, "served_model", ServedModel.from_dict(self.served_model, "served_model"))
            except UserInputError as error:
                raise ValueError(str(error)) from error


@register_backend_kind("served")
class ServedBackend(BackendKind):
    provides = frozenset({"tokenizer", "logprobs"})
    Settings = ServedSettings
    max_concurrency = 4
    """A few requests at once: a batching server (vLLM, TGI, llama-server --parallel N) answers them in about the
    time of one, a one-at-a-time server queues them; a backend file sets its server's (``max_concurrency:``)."""

    @classmethod
    def settings_from(cls, values, source):
        if values.get("model"):
            from icr2_components.backends.kind import BackendError

            raise BackendError(f"{source}: `model` is for kind: local; a served model is served_model.model.")
        return super().settings_from(values, source)

    @property
    def served(self) -> ServedModel:
        return self.settings.served_model

    def describe(self) -> str:
        return f"{self.served.model} at {self.served.api_base_url}"

    def reader_label(self, model: str | None) -> str:
        return f"served:{self.served.model}@{self.served.api_base_url}"

    def tokenizer_spec(self) -> str | None:
        return self.served.tokenizer_spec()

    def follow_chat_reader(self, type_name: str, init_parameters: dict[str, Any]) -> dict[str, Any] | None:
        """A ServedChatReader with the same answer budget, greedy unless the reader samples."""
        sampling = init_parameters.get("do_sample", False)
        return {"type": SERVED_READER, "init_parameters": {
            **self.served.to_dict(), "max_new_tokens": init_parameters.get("max_new_tokens", 64),
            "temperature": float(init_parameters.get("temperature", 1.0)) if sampling else 0.0}}

    def follow_yes_no_asker(self, type_name: str, init_parameters: dict[str, Any]) -> dict[str, Any] | None:
        """The gate asks the server (P(yes) from top log-probabilities) instead of loading a model."""
        served = self.served.to_dict()
        server = {key: served[key] for key in SERVER_KEYS if served.get(key) is not None}
        return {"type": type_name, "init_parameters": {**init_parameters, "model": None, "chat_generator": None,
                                                       "server": server}}
