"""Loading YAML pipelines with this package on Haystack's deserialization allowlist (never ``unsafe``)."""

from __future__ import annotations

import os
from pathlib import Path

from haystack import Pipeline
from haystack.core.errors import DeserializationError

ALLOWED_MODULES = ["icr2_components.*"]


class PipelineLoadError(ValueError):
    """A pipeline YAML could not be loaded; the message says which file and why."""


def load_pipeline(path: str | os.PathLike, extra_allowed_modules: list[str] | None = None) -> Pipeline:
    """Load ``pipelines/<name>.yaml`` allowing only Haystack's defaults, ``icr2_components`` and any extras.

    Usage:
        >>> from icr2_components.pipeline_loading import load_pipeline
        >>> pipeline = load_pipeline("pipelines/closed_book.yaml")
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Pipeline file not found: {path}")
    return loads_pipeline(path.read_text(), source=str(path), extra_allowed_modules=extra_allowed_modules)


def loads_pipeline(text: str, source: str = "<string>", extra_allowed_modules: list[str] | None = None) -> Pipeline:
    allowed = ALLOWED_MODULES + list(extra_allowed_modules or [])
    try:
        return Pipeline.loads(text, allowed_modules=allowed)
    except DeserializationError as error:
        raise PipelineLoadError(
            f"{source}: {error}. Only Haystack's own modules and {allowed} may be named in a pipeline; "
            "pass extra_allowed_modules (or set HAYSTACK_DESERIALIZATION_ALLOWLIST) to trust another package."
        ) from error
