"""icr2_components: Haystack 3 components for long-context retrieval-augmented generation.

Importing the package (or any module of it) sets no environment variable, logging setting, file or thread: the
``icr2`` command, the server and the benches choose their own defaults (``apply_environment_defaults``). The
names below are imported on first use, so ``import icr2_components`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "load_pipeline": "icr2_components.pipeline_loading",
    "technique_component": "icr2_components.technique_component",
    "resolve_model": "icr2_components.models.resolver",
    "apply_environment_defaults": "icr2_components._environment",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'icr2_components' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = ["__version__", *_EXPORTS]
