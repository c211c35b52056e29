"""Model loading in one place: the resolver (aliases, paths, hub ids) and the process-wide cache."""

from icr2_components.models.resolver import ModelResolutionError, resolve_gguf, resolve_model

__all__ = [
    "ModelResolutionError",
    "resolve_gguf",
    "resolve_model",
]
