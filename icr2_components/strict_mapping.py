"""Building a config dataclass from a YAML mapping, refusing keys it does not have (a typo must not be ignored).

Shared by the index configs (``stores/config.py``) and the training recipes (``training/recipe.py``).
"""

from __future__ import annotations

import dataclasses
from typing import Any


def dataclass_from_mapping(cls, values: Any, where: str, error: type[Exception] = ValueError):
    """``cls(**values)``; None gives the defaults. Raises ``error`` naming ``where`` for a non-mapping or for
    unknown keys, with the allowed keys listed."""
    if values is None:
        return cls()
    if not isinstance(values, dict):
        raise error(f"{where} must be a mapping, got {type(values).__name__}.")
    allowed = sorted(f.name for f in dataclasses.fields(cls))
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise error(f"unknown key(s) {unknown} in {where}; allowed keys: {allowed}.")
    return cls(**values)
