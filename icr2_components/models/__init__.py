"""Model loading in one place: the resolver (aliases, paths, hub ids) and the process-wide cache."""

from icr2_components.models.cache import MODEL_CACHE, ModelCache, default_device
from icr2_components.models.resolver import (
    MINILM_ALIAS,
    SMOLLM2_ALIAS,
    SMOLLM2_GGUF_ALIAS,
    ModelResolutionError,
    bundled_gguf_path,
    is_bundled_alias,
    resolve_gguf,
    resolve_model,
)

__all__ = [
    "MODEL_CACHE",
    "MINILM_ALIAS",
    "SMOLLM2_ALIAS",
    "SMOLLM2_GGUF_ALIAS",
    "ModelCache",
    "ModelResolutionError",
    "bundled_gguf_path",
    "default_device",
    "is_bundled_alias",
    "resolve_gguf",
    "resolve_model",
]
