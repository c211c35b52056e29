"""``kind: local``: the model runs in this process with transformers (the pipelines' own ``model:`` values), or,
with ``model: <Hugging Face id or path>``, every reader, gate and white-box component runs on that model and
token budgets count with its tokenizer. Everything is available: weights, tokenizer, log-probabilities."""

from __future__ import annotations

from dataclasses import dataclass

from icr2_components.backends.kind import BackendKind, register_backend_kind


@dataclass(frozen=True)
class LocalSettings:
    model: str | None = None

    def __post_init__(self) -> None:
        if self.model is not None and (not isinstance(self.model, str) or not self.model.strip()):
            raise ValueError(f"model must be a Hugging Face id, local path or bundled alias, got {self.model!r}.")


@register_backend_kind("local")
class LocalBackend(BackendKind):
    provides = frozenset({"weights", "tokenizer", "logprobs"})
    Settings = LocalSettings

    @classmethod
    def settings_from(cls, values, source):
        if values.get("served_model"):
            from icr2_components.backends.kind import BackendError

            raise BackendError(f"{source}: served_model is for kind: served.")
        return super().settings_from(values, source)

    def describe(self) -> str:
        return f"local{': ' + self.settings.model if self.settings.model else ''}"

    def reader_label(self, model: str | None) -> str:
        return f"local:{self.settings.model or model}"

    def local_model(self) -> str | None:
        return self.settings.model

    def tokenizer_spec(self) -> str | None:
        return self.settings.model
