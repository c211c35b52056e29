"""The name transformers gives a model's key/value cache, for the installed version.

transformers 5.2x renamed it from ``past_key_values`` to ``cache``: the argument of a model's ``forward`` and of
``generate``, and the field of their outputs. The old name is still accepted there with a deprecation warning and
goes in a later release; code that starts from or keeps a cache (the prompt-prefix caches, context-aware decoding)
names it through these, so it works on both sides of the rename and warns on neither.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

NEW_NAME, OLD_NAME = "cache", "past_key_values"


@cache
def _forward_takes_new_name(model_class: type) -> bool:
    return NEW_NAME in inspect.signature(model_class.forward).parameters


def forward_cache_keyword(model: Any) -> str:
    """The keyword ``model``'s ``forward`` takes a cache under (``cache``, or ``past_key_values`` before the rename)."""
    return NEW_NAME if _forward_takes_new_name(type(model)) else OLD_NAME


def generate_cache_keyword() -> str:
    """The keyword ``generate`` takes the cache it starts from under (transformers lists its cache names)."""
    try:
        from transformers.generation.utils import ALL_CACHE_NAMES
    except ImportError:
        return OLD_NAME
    return NEW_NAME if NEW_NAME in ALL_CACHE_NAMES else OLD_NAME


def output_cache(output: Any) -> Any:
    """The cache a model's output carries (None when it kept none), under whichever name the version gives it."""
    fields = getattr(type(output), "__dataclass_fields__", {})
    return getattr(output, NEW_NAME if NEW_NAME in fields else OLD_NAME, None)


__all__ = ["forward_cache_keyword", "generate_cache_keyword", "output_cache"]
