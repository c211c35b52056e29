"""Checks of a component's parameters, shared by its ``__init__`` and its ``run``'s per-call overrides.

A value a component refuses at construction is refused the same way when ``run`` is given it for one call: a
run-time ``budget_passages=0`` or ``max_new_tokens=0`` is an error naming the parameter, never a silent fallback
to the init value (``x or self.x`` reads 0 as "not given") nor an empty answer. Each check returns the value, so
a component writes ``self.top_m = positive_int(top_m, "top_m", optional=True)`` once and the same call on the
override in ``run``; :func:`override` then picks the call's value when one was given (``None`` means not given).

Errors are :class:`~icr2_components.errors.UserInputError` (a ``ValueError``), one line naming the parameter,
what it must be and the value given.

Usage:
    >>> positive_int(3, "top_m")
    3
    >>> positive_int(0, "budget_passages", optional=True)
    UserInputError: budget_passages must be a positive integer or None, got 0.
    >>> override(None, 5), override(2, 5)
    (5, 2)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Annotated, Any, TypeVar

from pydantic import Field

from icr2_components.errors import UserInputError
from icr2_components.strict_mapping import NonNegativeInt, PositiveInt, PositiveNumber, TypeCheckError, check_type
from icr2_components.text.blank import is_blank

T = TypeVar("T")

# The declarations of the numeric checks, read by pydantic in strict mode (strict_mapping): no bool for a number,
# no NaN or infinity, the range beside the type. A component declares a parameter once with one of these (or its
# own ``Annotated`` type, ranges beside it) and checks the init value and a run's override with :func:`checked`.
FiniteNumber = float


def _refuse(name: str, what: str, value: Any, optional: bool, hint: str) -> UserInputError:
    return UserInputError(
        f"{name} must be {what}{' or None' if optional else ''}{hint}, got {value!r}."
    )


def _fits(value: Any, declared: Any) -> bool:
    try:
        kept = check_type(value, declared, "")
    except TypeCheckError:
        return False
    # a parameter given in code is not YAML: the string "0.5" is not the number 0.5 there
    return not (isinstance(value, str) and not isinstance(kept, str))


def checked(value: Any, declared: Any, name: str, what: str, *, optional: bool = False, hint: str = "") -> Any:
    """``value`` when it fits ``declared`` (a type, with its range in ``Annotated``: ``Annotated[float,
    Field(gt=0, le=2)]``), checked by pydantic in strict mode; None passes with ``optional``. A number comes back
    as given (an int stays an int in a float parameter).

    :param what: the words for what the parameter must be, e.g. ``"a number in (0, 2]"``.
    :raises UserInputError: one line naming ``name``, ``what`` and the value (a bool, NaN or infinity is refused
        wherever a number is declared).
    """
    if value is None and optional:
        return None
    if not _fits(value, declared):
        raise _refuse(name, what, value, optional, hint)
    return value


def positive_int(value: Any, name: str, *, optional: bool = False, hint: str = "") -> Any:
    """``value`` when it is an integer >= 1 (or None with ``optional``); else a one-line error naming ``name``.

    :param hint: text after "or None", e.g. ``" (no limit)"``.
    """
    return checked(value, PositiveInt, name, "a positive integer", optional=optional, hint=hint)


def non_negative_int(value: Any, name: str, *, optional: bool = False, hint: str = "") -> Any:
    """``value`` when it is an integer >= 0 (or None with ``optional``)."""
    return checked(value, NonNegativeInt, name, "a non-negative integer", optional=optional, hint=hint)


@functools.lru_cache(maxsize=256)
def _between(kind: type, low: float, high: float) -> Any:
    """The declaration of a number in ``[low, high]``, made once per range (its checker is built once)."""
    return Annotated[kind, Field(ge=low, le=high)]


def int_between(value: Any, name: str, low: int, high: int, *, optional: bool = False, hint: str = "") -> Any:
    """``value`` when it is an integer in ``[low, high]`` (or None with ``optional``)."""
    return checked(value, _between(int, low, high), name, f"an integer from {low} to {high}", optional=optional,
                   hint=hint)


def positive_number(value: Any, name: str, *, optional: bool = False, hint: str = "") -> Any:
    """``value`` when it is a finite number > 0 (or None with ``optional``): infinity and NaN are refused."""
    return checked(value, PositiveNumber, name, "a number > 0", optional=optional, hint=hint)


def number_between(value: Any, name: str, low: float, high: float, *, optional: bool = False, hint: str = "") -> Any:
    """``value`` when it is a finite number in ``[low, high]`` (or None with ``optional``)."""
    return checked(value, _between(float, low, high), name, f"a number in [{low}, {high}]", optional=optional,
                   hint=hint)


def finite_number(value: Any, name: str, *, optional: bool = False, hint: str = "") -> Any:
    """``value`` when it is a finite number (not a bool, NaN or infinity), or None with ``optional``."""
    return checked(value, FiniteNumber, name, "a finite number", optional=optional, hint=hint)


def one_of(value: Any, name: str, choices: Iterable[Any], *, optional: bool = False) -> Any:
    """``value`` when it is one of ``choices`` (or None with ``optional``)."""
    choices = tuple(choices)
    if value is None and optional:
        return None
    if value not in choices:
        raise _refuse(name, f"one of {', '.join(repr(c) for c in choices)}", value, optional, "")
    return value


def non_empty_text(value: Any, name: str, *, optional: bool = False) -> Any:
    """``value`` when it is a string with some non-space text (or None with ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or is_blank(value):
        raise _refuse(name, "a non-empty string", value, optional, "")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def document_list(value: Any, name: str = "documents", *, optional: bool = False) -> Any:
    """``value`` when it is a list of Haystack ``Document`` objects (or None with ``optional``): a component's
    ``run`` given None, a string or a list of dicts says which parameter and which item, instead of failing inside."""
    from haystack import Document

    if value is None and optional:
        return None
    if not isinstance(value, (list, tuple)):
        raise _refuse(name, "a list of Haystack Documents", value, optional, "")
    for position, item in enumerate(value):
        if not isinstance(item, Document):
            raise UserInputError(f"{name}[{position}] must be a Haystack Document, got {_shown(item)}.")
    return value


def message_list(value: Any, name: str = "messages") -> Any:
    """``value`` when it is a non-empty list of Haystack ``ChatMessage`` objects with some text among them: a
    reader's ``run`` given None, an empty list, strings or only empty messages says so instead of answering an
    empty prompt or failing inside."""
    from haystack.dataclasses import ChatMessage

    if not isinstance(value, (list, tuple)) or not value:
        raise _refuse(name, "a non-empty list of ChatMessages", value, False, "")
    for position, item in enumerate(value):
        if not isinstance(item, ChatMessage):
            raise UserInputError(f"{name}[{position}] must be a Haystack ChatMessage, got {_shown(item)}.")
    if all(is_blank(message.text or "") for message in value):
        raise UserInputError(f"{name} hold no text: every one of the {len(value)} message(s) is empty or shows "
                             "nothing (white space or invisible characters only).")
    return value


def boolean(value: Any, name: str, *, optional: bool = False) -> Any:
    """``value`` when it is True or False (or None with ``optional``): a string such as ``"no"`` is refused, not
    read as true."""
    if value is None and optional:
        return None
    if not isinstance(value, bool):
        raise _refuse(name, "True or False", value, optional, "")
    return value


def override(call_value: T | None, init_value: T) -> T:
    """The value a run uses: the call's when given (not None; 0 and "" are given values), else the init value."""
    return init_value if call_value is None else call_value


__all__ = [
    "FiniteNumber",
    "NonNegativeInt",
    "PositiveInt",
    "PositiveNumber",
    "boolean",
    "checked",
    "document_list",
    "finite_number",
    "int_between",
    "message_list",
    "non_empty_text",
    "non_negative_int",
    "number_between",
    "one_of",
    "override",
    "positive_int",
    "positive_number",
]
