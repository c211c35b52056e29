"""Typed, strict reading of YAML/JSON mappings into dataclasses, by pydantic in strict mode.

One input layer for the index configs (``stores/config.py``), the corpus sections (``corpora/``), the training
recipes (``training/recipe.py``), the backend files (``backends/``), the question-set files and the data records
(gate evaluation files, ICR2 benchmarks, KILT files). A dataclass declares each field's type, and its range beside
it with ``Annotated[float, Field(gt=0)]``; :func:`dataclass_from_mapping` checks a mapping against those
declarations with a pydantic ``TypeAdapter`` in strict mode, where

- a value whose type is not the declared one is refused, nothing is coerced: ``enabled: "false"`` is a string (a
  non-empty string is true in Python, so reading it as a boolean would silently flip the setting), and
  ``max_tokens: true`` is a boolean, not the count 1;
- NaN and infinity are refused in every number (``bm25_k1: .nan`` would build an index that finds nothing);
- an unknown key is refused with the allowed keys and the nearest known name (``lr``: did you mean ``learning_rate``?);
- every error is one line naming where (the file and the section), the key, the value and what is expected.

Usage:
    >>> @dataclass
    ... class Section:
    ...     enabled: bool = True
    ...     words: Annotated[int, Field(ge=1)] = 100
    >>> dataclass_from_mapping(Section, {"enabled": "false"}, "section 'embedding' of kilt.yaml", ConfigError)
    ConfigError: section 'embedding' of kilt.yaml: key 'enabled' is 'false' (a string); expected a boolean (true or
    false).
    >>> dataclass_from_mapping(Section, {"words": 0}, "section 'embedding' of kilt.yaml", ConfigError)
    ConfigError: section 'embedding' of kilt.yaml: key 'words' is 0 (an integer); expected an integer >= 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import math
import re
import types
import typing
from typing import Annotated, Any, Union

from pydantic import BeforeValidator, ConfigDict, Field, PlainValidator, TypeAdapter, ValidationError

# PyYAML follows YAML 1.1, where `1e-5` (no dot) is a string, not a float: a float field accepts such a
# string when it is a plain decimal number, so `learning_rate: 1e-5` works as people write it.
_FLOAT_TEXT = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")

#: pydantic's settings for every check: strict types (no bool for a number, no "3" for 3), no NaN or infinity
STRICT = ConfigDict(strict=True, allow_inf_nan=False, arbitrary_types_allowed=True)


#: the ranges most declarations use, beside the type: ``batch_size: PositiveInt = 64``
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveNumber = Annotated[float, Field(gt=0)]
NonNegativeNumber = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]
#: a file or folder path: text without the NUL character no operating system takes in a path
PathText = Annotated[str, Field(pattern=r"^[^\x00]*$", description="a path cannot hold the NUL character")]


class TypeCheckError(ValueError):
    """A value does not have its declared type; the message names the key, the value and the expected type."""


# -- what a declared type reads as --------------------------------------------------------------------------------


def _constraints(metadata: typing.Iterable[Any]) -> list[str]:
    """``['> 0', '<= 1']`` for the range metadata of an ``Annotated`` type (``Field(gt=0, le=1)``)."""
    words = []
    for item in metadata:
        inner = getattr(item, "metadata", None)  # a pydantic FieldInfo holds annotated_types objects
        if isinstance(inner, list):
            words.extend(_constraints(inner))
            continue
        for attribute, symbol in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            bound = getattr(item, attribute, None)
            if bound is not None:
                words.append(f"{symbol} {bound}")
        minimum = getattr(item, "min_length", None)
        if minimum:
            words.append("not empty" if minimum == 1 else f"of at least {minimum} items")
    return words


def describe_type(expected: Any) -> str:
    """A reader's name for a type annotation: ``int | None`` -> 'an integer or null';
    ``Annotated[float, Field(gt=0)]`` -> 'a number > 0'."""
    origin = typing.get_origin(expected)
    if origin is Annotated:
        base, *metadata = typing.get_args(expected)
        words = _constraints(metadata)
        return describe_type(base) + (" " + " and ".join(words) if words else "")
    if origin in (Union, types.UnionType):
        return " or ".join(describe_type(arg) for arg in typing.get_args(expected))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(arg) for arg in typing.get_args(expected))
    if origin in (list, tuple, set, frozenset):
        args = [arg for arg in typing.get_args(expected) if arg is not Ellipsis]
        inner = describe_type(args[0]) if args else "values"
        return f"a list of {_plural(inner)}"
    if origin is dict:
        args = typing.get_args(expected)
        if len(args) == 2 and args[1] is not Any:
            return f"a mapping of {_plural(describe_type(args[0]))} to {_plural(describe_type(args[1]))}"
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
    head, _, rest = description.split(" (")[0].partition(" ")
    return head + "s" + (" " + rest if rest else "")


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


# -- the pydantic side ----------------------------------------------------------------------------------------------


def _float_text(value: Any) -> Any:
    """YAML 1.1's ``1e-5`` (a string) as the float it means; an int as a float; anything else unchanged (and then
    refused by the strict float check)."""
    if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
        return float(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


_YAML_FLOAT = Annotated[float, BeforeValidator(_float_text)]


def _pydantic_type(expected: Any) -> Any:
    """``expected`` as pydantic checks it: floats read YAML 1.1's ``1e-5``; a list, tuple or set is given as a
    list (YAML has no other sequence); a nested dataclass is an instance of it (a mapping for one is read by
    :func:`dataclass_from_mapping` first, field by field)."""
    if expected is float:
        return _YAML_FLOAT
    if expected is Any or expected is typing.Any:
        return Any
    origin = typing.get_origin(expected)
    args = typing.get_args(expected)
    if origin is Annotated:
        return Annotated[(_pydantic_type(args[0]), *args[1:])]  # type: ignore[misc]
    if origin in (Union, types.UnionType):
        # a Union of a tuple built at run time (UP007's X | Y needs the members written out)
        return Union[tuple(_pydantic_type(arg) for arg in args)]  # type: ignore[return-value]  # noqa: UP007
    if origin in (list, tuple, set, frozenset):
        items = [arg for arg in args if arg is not Ellipsis]
        return list[_pydantic_type(items[0]) if items else Any]  # type: ignore[misc]
    if origin is dict:
        return dict[tuple(_pydantic_type(arg) for arg in args)] if args else dict  # type: ignore[misc]
    if expected is list or expected is tuple:
        return list
    if dataclasses.is_dataclass(expected) and isinstance(expected, type):
        return Annotated[Any, PlainValidator(_instance_of(expected))]
    return expected


def _instance_of(cls: type) -> typing.Callable[[Any], Any]:
    """A check that a value is an instance of ``cls`` (pydantic takes no strict config for a dataclass type)."""

    def check(value: Any) -> Any:
        if not isinstance(value, cls):
            raise ValueError(f"not a {cls.__name__}")
        return value

    return check


def _as_declared(value: Any, expected: Any) -> Any:
    """A list checked for a ``tuple[...]``/``set[...]`` field becomes that type, as the field declares it."""
    origin = typing.get_origin(expected)
    if origin is Annotated:
        return _as_declared(value, typing.get_args(expected)[0])
    if origin in (tuple, set, frozenset) and isinstance(value, list):
        return origin(value)
    return value


@functools.lru_cache(maxsize=1024)
def _cached_adapter(expected: Any) -> TypeAdapter:
    return TypeAdapter(_pydantic_type(expected), config=STRICT)


def _adapter(expected: Any) -> TypeAdapter:
    """A strict ``TypeAdapter`` for ``expected``, built once per declared type (a declaration is a module-level
    object: a type made anew at each call, ``Annotated[int, Field(ge=low)]``, is built anew, so declare it once);
    a type that cannot be hashed is built each time."""
    try:
        return _cached_adapter(expected)
    except TypeError:
        return TypeAdapter(_pydantic_type(expected), config=STRICT)


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return any(_non_finite(item) for item in value)
    if isinstance(value, dict):
        return any(_non_finite(item) for item in value.values())
    return False


def _notes(expected: Any) -> list[str]:
    """The ``Field(description=...)`` texts in a declared type: what a value means, said after what it must be."""
    origin = typing.get_origin(expected)
    args = typing.get_args(expected)
    if origin is Annotated:
        found = [item.description for item in args[1:] if isinstance(getattr(item, "description", None), str)]
        return found + _notes(args[0])
    if origin in (Union, types.UnionType):
        return [note for arg in args for note in _notes(arg)]
    return []


def _bad_item(refusal: ValidationError) -> str:
    """``"item [0][1] is '18' (a string)"`` for the deepest list item pydantic refused, or "" for the value itself."""
    best: tuple[tuple[int, ...], Any] | None = None
    for problem in refusal.errors():
        positions = tuple(part for part in problem["loc"] if isinstance(part, int))
        if positions and (best is None or len(positions) > len(best[0])):
            best = positions, problem.get("input")
    if best is None:
        return ""
    return f"item {''.join(f'[{position}]' for position in best[0])} is {_show(best[1])}"


def check_type(value: Any, expected: Any, where: str, error: type[Exception] = TypeCheckError) -> Any:
    """``value`` when it has the declared type ``expected`` (a typing annotation, ranges in ``Annotated``), else
    ``error`` naming ``where``, the value and what is expected. The value comes back unchanged, except a number
    in a float field (``1e-5`` as YAML 1.1 reads it, or an integer), which comes back as the float it means.

    :param where: the key as the user wrote it, e.g. ``"section 'corpus' of kilt.yaml: key 'passage_words'"``.
    :raises error: the value does not fit the declaration (wrong type, NaN or infinity, out of range).
    """
    try:
        checked = _adapter(expected).validate_python(value)
    except ValidationError as refusal:
        notes = (["NaN and infinity are refused"] if _non_finite(value) else []) + _notes(expected)
        item = _bad_item(refusal)
        if item:
            notes.insert(0, item)
        said = f" ({'; '.join(notes)})" if notes else ""
        raise error(f"{where} is {_show(value)}; expected {describe_type(expected)}{said}.") from None
    return _as_declared(checked, expected)


def field_types(cls) -> dict[str, Any]:
    """The resolved annotations of a dataclass, ranges included (``from __future__ import annotations`` leaves
    them strings); resolved once per class, so that each declaration's checker is built once."""
    return dict(_resolved_hints(cls))


@functools.lru_cache(maxsize=512)
def _resolved_hints(cls) -> typing.Mapping[str, Any]:
    return types.MappingProxyType(typing.get_type_hints(cls, include_extras=True))


def nearest_names(unknown: typing.Iterable[str], allowed: typing.Iterable[Any]) -> dict[str, str]:
    """``{unknown name: the nearest allowed name}`` for the names close enough to one to be a typo."""
    choices = [str(name) for name in allowed]
    nearest = {}
    for name in unknown:
        found = difflib.get_close_matches(str(name), choices, n=1, cutoff=0.6)
        if found:
            nearest[str(name)] = found[0]
    return nearest


def check_known_keys(values: Any, allowed: Any, where: str, error: type[Exception] = ValueError, *,
                     what: str = "key(s)", hint: str = "") -> None:
    """Refuses the keys of ``values`` that are not in ``allowed``, naming them, ``where``, the allowed ones and the
    nearest allowed name of each typo: ``unknown key(s) ['lr'] in section training; allowed keys: [...]. Did you
    mean 'learning_rate' for 'lr'?`` (``hint``, when given, follows)."""
    allowed = sorted(allowed)
    unknown = sorted(set(values) - set(allowed), key=str)
    if unknown:
        label = what.replace("(s)", "s")
        nearest = nearest_names(unknown, allowed)
        guess = (" Did you mean " + ", ".join(f"{right!r} for {wrong!r}" for wrong, right in nearest.items()) + "?"
                 if nearest else "")
        raise error(f"unknown {what} {unknown} in {where}; allowed {label}: {allowed}.{guess}"
                    + (f" {hint}" if hint else ""))


@contextlib.contextmanager
def at_key(*keys: Any) -> typing.Iterator[None]:
    """Errors raised inside name where they happened: ``keys`` go before the error's ``field_path`` (the keys,
    outermost first, of the value it refuses), which :func:`with_yaml_line` turns into the file's line."""
    try:
        yield
    except ValueError as error:
        error.field_path = (*keys, *getattr(error, "field_path", ()))  # type: ignore[attr-defined]
        raise


def yaml_line(text: str, path: typing.Sequence[Any]) -> int | None:
    """The line (from 1) of the deepest key of ``path`` found in the YAML ``text``, or None."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None
    for key in path:
        if not isinstance(node, yaml.MappingNode):
            break
        found = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(key)]
        if not found:
            break
        key_node, node = found[-1]
        line = key_node.start_mark.line + 1
    return line


def with_yaml_line(error: Exception, text: str, source: str) -> Exception:
    """``error`` located in its file when its ``field_path`` is found in the YAML ``text``: ``source`` in the
    message becomes ``source:LINE`` (as compilers and editors write it), or `` (line N)`` ends it; the same error
    type, path kept. Else ``error`` itself."""
    path = getattr(error, "field_path", None)
    line = yaml_line(text, path) if path else None
    if line is None:
        return error
    message = str(error)
    located_text = (message.replace(source, f"{source}:{line}", 1) if source and source in message
                    else f"{message} (line {line})")
    located = type(error)(located_text)
    located.field_path = path  # type: ignore[attr-defined]
    return located


def _has_default(item: dataclasses.Field) -> bool:
    return item.default is not dataclasses.MISSING or item.default_factory is not dataclasses.MISSING


def dataclass_from_mapping(cls, values: Any, where: str, error: type[Exception] = ValueError):
    """``cls(**values)`` with every value checked against its field's declaration; None gives the defaults.

    A field whose type is a dataclass is built from its mapping the same way (its ``where`` names the key).

    :raises error: naming ``where`` for a non-mapping, for unknown keys (with the allowed keys listed and the
        nearest one to each), for a required key left out, for a value of the wrong type, NaN or infinity, or
        out of its declared range (with the key, the value and what is expected), and for a value the class's own
        ``__post_init__`` refuses (its message after ``where``).
    """
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise error(f"{where} must be a mapping, got {_show(values)}.")
    declared = [item for item in dataclasses.fields(cls) if item.init]
    unknown = sorted(set(values) - {item.name for item in declared}, key=str)
    with at_key(*unknown[:1]):
        check_known_keys(values, (item.name for item in declared), where, error)
    missing = [item.name for item in declared if not _has_default(item) and item.name not in values]
    if missing:
        raise error(f"{where}: key {missing[0]!r} is required; add it.")
    hints = field_types(cls)
    checked: dict[str, Any] = {}
    for key, value in values.items():
        expected = hints.get(key, Any)
        nested = _dataclass_in(expected)
        with at_key(key):
            if nested is not None and isinstance(value, dict):
                checked[key] = dataclass_from_mapping(nested, value, f"{where}, key '{key}'", error)
                continue
            checked[key] = check_type(value, expected, f"{where}: key '{key}'", error)
    try:
        return cls(**checked)
    except error:
        raise
    except (TypeError, ValueError) as problem:
        text = " ".join(str(problem).split())
        raise error(text if text.startswith(where) else f"{where}: {text}") from problem


def check_fields(instance: Any, where: str, error: type[Exception] = ValueError, *, _prefix: str = "") -> Any:
    """Every field of a dataclass ``instance`` checked against its declaration (a config built in code rather than
    read from a file gets the same checks, from the same declarations); returns ``instance``.

    :raises error: ``"{where}: key 'training.learning_rate' is nan (a number); expected a number > 0 ..."`` for the
        first field whose value does not fit.
    """
    hints = field_types(type(instance))
    for item in dataclasses.fields(instance):
        value = getattr(instance, item.name)
        expected = hints.get(item.name, Any)
        nested = _dataclass_in(expected)
        if nested is not None and isinstance(value, nested):
            check_fields(value, where, error, _prefix=f"{_prefix}{item.name}.")
            continue
        check_type(value, expected, f"{where}: key '{_prefix}{item.name}'", error)
    return instance


def _dataclass_in(expected: Any):
    """The dataclass in ``X``, ``X | None`` or ``Annotated[X, ...]``, else None."""
    if typing.get_origin(expected) is Annotated:
        return _dataclass_in(typing.get_args(expected)[0])
    if dataclasses.is_dataclass(expected):
        return expected
    if typing.get_origin(expected) in (Union, types.UnionType):
        found = [arg for arg in typing.get_args(expected) if dataclasses.is_dataclass(arg)]
        return found[0] if len(found) == 1 else None
    return None


__all__ = [
    "STRICT",
    "Fraction",
    "NonNegativeInt",
    "NonNegativeNumber",
    "PathText",
    "PositiveInt",
    "PositiveNumber",
    "TypeCheckError",
    "at_key",
    "check_fields",
    "check_known_keys",
    "check_type",
    "dataclass_from_mapping",
    "describe_type",
    "field_types",
    "nearest_names",
    "with_yaml_line",
    "yaml_line",
]
