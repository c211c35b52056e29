"""Typed, strict reading of YAML/JSON mappings: unknown keys and wrongly typed values are errors, never no-ops.

One place for the checks shared by the index configs (``stores/config.py``), the training recipes
(``training/recipe.py``) and the data records (gate evaluation files, ICR2 benchmarks, KILT files): a value
whose type is not the declared one is refused with a message that names the key, the value and the type that
was expected. Nothing is coerced by ``cls(**values)`` behind the user's back: ``enabled: "false"`` is a
string, and a non-empty string is true in Python, so reading it as a boolean would silently flip the setting.

Usage:
    >>> @dataclass
    ... class Section:
    ...     enabled: bool = True
    ...     words: int = 100
    >>> dataclass_from_mapping(Section, {"enabled": "false"}, "section 'embedding' of kilt.yaml", ConfigError)
    ConfigError: section 'embedding' of kilt.yaml: key 'enabled' is 'false' (a string); expected a boolean (true or
    false)
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Any, Union

# PyYAML follows YAML 1.1, where `1e-5` (no dot) is a string, not a float: a float field accepts such a
# string when it is a plain decimal number, so `learning_rate: 1e-5` works as people write it.
_FLOAT_TEXT = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


class TypeCheckError(ValueError):
    """A value does not have its declared type; the message names the key, the value and the expected type."""


def describe_type(expected: Any) -> str:
    """A reader's name for a type annotation: ``int | None`` -> 'an integer or null'."""
    origin = typing.get_origin(expected)
    if origin in (Union, types.UnionType):
        return " or ".join(describe_type(arg) for arg in typing.get_args(expected))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(arg) for arg in typing.get_args(expected))
    if origin in (list, tuple, set, frozenset):
        args = typing.get_args(expected)
        inner = describe_type(args[0]) if args else "values"
        return f"a list of {_plural(inner)}"
    if origin is dict:
        return "a mapping"
    if expected is type(None):
        return "null"
    if dataclasses.is_dataclass(expected):
        return "a mapping"
    return {
        bool: "a boolean (true or false)",
        int: "an integer",
        float: "a number",
        str: "a string",
        dict: "a mapping",
        list: "a list",
        Any: "any value",
    }.get(expected, getattr(expected, "__name__", str(expected)))


def _plural(description: str) -> str:
    for article in ("an ", "a "):
        if description.startswith(article):
            description = description[len(article):]
            break
    return description.split(" (")[0] + "s"


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    kind = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)
    return f"{text} ({kind})" if value is not None else "null"


def _matches(value: Any, expected: Any) -> tuple[bool, Any]:
    """(ok, value to keep); the value only changes for a numeric string in a float field, or an int as float."""
    if expected is Any:
        return True, value
    origin = typing.get_origin(expected)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(expected):
            ok, kept = _matches(value, arg)
            if ok:
                return True, kept
        return False, value
    if origin is typing.Literal:
        return value in typing.get_args(expected), value
    if expected is type(None):
        return value is None, value
    if origin in (list, tuple):
        if not isinstance(value, list):
            return False, value
        args = typing.get_args(expected)
        if not args or args[0] is Any or args[0] is Ellipsis:
            return True, value
        kept_items = []
        for item in value:
            ok, kept = _matches(item, args[0])
            if not ok:
                return False, value
            kept_items.append(kept)
        return True, kept_items if origin is list else tuple(kept_items)
    if origin is dict or expected is dict:
        return isinstance(value, dict), value
    if expected is bool:
        return isinstance(value, bool), value
    if expected is int:
        # bool is an int subclass in Python; `true` for a count is a mistake, and so is 100.7
        return isinstance(value, int) and not isinstance(value, bool), value
    if expected is float:
        if isinstance(value, bool):
            return False, value
        if isinstance(value, (int, float)):
            return True, float(value)
        if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
            return True, float(value)
        return False, value
    if expected is str:
        return isinstance(value, str), value
    if dataclasses.is_dataclass(expected):
        return isinstance(value, expected), value
    if isinstance(expected, type):
        return isinstance(value, expected), value
    return True, value


def check_type(value: Any, expected: Any, where: str, error: type[Exception] = TypeCheckError) -> Any:
    """``value`` when it has the declared type ``expected`` (a typing annotation), else ``error`` naming ``where``.

    :param where: the key as the user wrote it, e.g. ``"section 'corpus' of kilt.yaml: key 'passage_words'"``.
    """
    ok, kept = _matches(value, expected)
    if not ok:
        raise error(f"{where} is {_show(value)}; expected {describe_type(expected)}.")
    return kept


def field_types(cls) -> dict[str, Any]:
    """The resolved annotations of a dataclass (``from __future__ import annotations`` leaves them strings)."""
    return typing.get_type_hints(cls)


def check_known_keys(values: Any, allowed: Any, where: str, error: type[Exception] = ValueError, *,
                     what: str = "key(s)", hint: str = "") -> None:
    """Refuses the keys of ``values`` that are not in ``allowed``, naming them, ``where`` and the allowed ones:
    ``unknown key(s) ['lr'] in section training; allowed keys: [...]`` (``hint``, when given, follows)."""
    allowed = sorted(allowed)
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        label = what.replace("(s)", "s")
        raise error(f"unknown {what} {unknown} in {where}; allowed {label}: {allowed}." + (f" {hint}" if hint else ""))


def dataclass_from_mapping(cls, values: Any, where: str, error: type[Exception] = ValueError):
    """``cls(**values)`` with every value checked against its field's annotation; None gives the defaults.

    Raises ``error`` naming ``where`` for a non-mapping, for unknown keys (with the allowed keys listed) and for
    a value of the wrong type (with the key, the value and the expected type). A field whose type is a dataclass
    is built from its mapping the same way.
    """
    if values is None:
        return cls()
    if not isinstance(values, dict):
        raise error(f"{where} must be a mapping, got {_show(values)}.")
    check_known_keys(values, (f.name for f in dataclasses.fields(cls)), where, error)
    hints = field_types(cls)
    checked: dict[str, Any] = {}
    for key, value in values.items():
        expected = hints.get(key, Any)
        nested = _dataclass_in(expected)
        if nested is not None and isinstance(value, dict):
            checked[key] = dataclass_from_mapping(nested, value, f"{where}, key '{key}'", error)
            continue
        checked[key] = check_type(value, expected, f"{where}: key '{key}'", error)
    return cls(**checked)


def _dataclass_in(expected: Any):
    """The dataclass in ``X`` or ``X | None``, else None."""
    if dataclasses.is_dataclass(expected):
        return expected
    if typing.get_origin(expected) in (Union, types.UnionType):
        found = [arg for arg in typing.get_args(expected) if dataclasses.is_dataclass(arg)]
        return found[0] if len(found) == 1 else None
    return None


__all__ = ["TypeCheckError", "check_type", "dataclass_from_mapping", "describe_type", "field_types"]
