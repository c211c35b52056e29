"""A registry of named variants: gate methods, decoding rules, store backends, retrieval methods.

Each kind of variant keeps one :class:`Registry` and a ``register_<kind>(name)`` decorator that checks what only
that kind needs (a frozen parameter dataclass, a settings dataclass, a name format) and then calls
:meth:`Registry.register`. The registry does what every kind shares: it refuses a name already held by another
object (naming the holder), accepts the same object again (or the same qualified name, which is what a
reloaded module registers), and answers an unknown name with an error listing the registered ones.

Usage example:
```python
from icr2_components.registry import Registry


class UnknownGreetingError(ValueError):
    pass


greetings: Registry[str] = Registry("greeting", UnknownGreetingError, how_to_add="Register one with
greetings.register.")
greetings.register("hello", "Hello!")
greetings.get("hello")        # 'Hello!'
greetings.names()             # ('hello',)
greetings.get("bye")          # UnknownGreetingError: Unknown greeting 'bye'; choose one of ['hello']. Register one ...
```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def qualified_name(obj: object) -> str | None:
    """``module.QualName`` of a class or function; None for an object that has no qualified name."""
    qualname = getattr(obj, "__qualname__", None)
    return None if qualname is None else f"{getattr(obj, '__module__', '?')}.{qualname}"


class Registry(Generic[T]):
    """Objects of one kind by name, in registration order.

    :param kind: what the registry holds, as messages name it (``"gate decider"``, ``"decoding rule"``).
    :param unknown_error: the exception class :meth:`get` raises for an unknown name.
    :param sort_names: list the names sorted (True) or in registration order (False).
    :param how_to_add: a sentence appended to the unknown-name message saying how to register a new one.
    :param origin: what a registered object stands for (e.g. the function a wrapper holds): duplicates are judged,
        and holders named, by their origin. The object itself when None.
    :param unknown_message: ``(name, registered names) -> message`` for an unknown name (before ``how_to_add``);
        when None, ``Unknown <kind> 'name'; choose one of [...].``
    :param taken_message: ``(name, holder's origin, newcomer's origin) -> message`` for a name held by another
        object; when None, ``The <kind> name 'name' is taken by <holder>; choose another name for <newcomer>.``
    """

    def __init__(
        self,
        kind: str,
        unknown_error: type[Exception] = ValueError,
        *,
        sort_names: bool = True,
        how_to_add: str = "",
        origin: Callable[[T], object] | None = None,
        unknown_message: Callable[[str, tuple[str, ...]], str] | None = None,
        taken_message: Callable[[str, object, object], str] | None = None,
    ) -> None:
        if not isinstance(kind, str) or not kind.strip():
            raise ValueError(
                f"A registry's kind must be a non-empty string (what it holds, for messages), got {kind!r}."
            )
        if not (isinstance(unknown_error, type) and issubclass(unknown_error, Exception)):
            raise TypeError(f"unknown_error must be an Exception subclass, got {unknown_error!r}.")
        self.kind = kind
        self.unknown_error = unknown_error
        self.sort_names = sort_names
        self.how_to_add = how_to_add
        self._origin = origin
        self._unknown_message = unknown_message
        self._taken_message = taken_message
        self._entries: dict[str, T] = {}

    def register(self, name: str, obj: T) -> T:
        """Register ``obj`` as ``name`` and return it; ValueError naming the holder when another object has the name.

        The same object again, or one with the same qualified name (its module reloaded), replaces the entry.
        """
        if not isinstance(name, str):
            raise TypeError(f"A {self.kind}'s name must be a string, got {name!r}.")
        held = self._entries.get(name)
        if held is not None and not self._same(held, obj):
            raise ValueError(self._describe_taken(name, self._origin_of(held), self._origin_of(obj)))
        self._entries[name] = obj
        return obj

    def unregister(self, name: str) -> T:
        """Remove and return the object registered as ``name`` (a test's or a plugin's clean-up)."""
        return self._entries.pop(name)

    def get(self, name: str) -> T:
        """The object registered as ``name``; :attr:`unknown_error`, listing the registered names, otherwise."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name is unknown too
            raise self.unknown_error(self._describe_unknown(name)) from None

    def names(self) -> tuple[str, ...]:
        """The registered names, sorted or in registration order (``sort_names``)."""
        return tuple(sorted(self._entries)) if self.sort_names else tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._entries
        except TypeError:
            return False

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={list(self.names())})"

    def _origin_of(self, obj: T) -> object:
        return obj if self._origin is None else self._origin(obj)

    def _same(self, held: T, newcomer: T) -> bool:
        held_origin, new_origin = self._origin_of(held), self._origin_of(newcomer)
        if held_origin is new_origin:
            return True
        held_name = qualified_name(held_origin)
        return held_name is not None and held_name == qualified_name(new_origin)

    def _describe_taken(self, name: str, holder: object, newcomer: object) -> str:
        if self._taken_message is not None:
            return self._taken_message(name, holder, newcomer)
        return (f"The {self.kind} name {name!r} is taken by {qualified_name(holder) or repr(holder)}; choose another "
                f"name for {qualified_name(newcomer) or repr(newcomer)}.")

    def _describe_unknown(self, name: object) -> str:
        names = self.names()
        if self._unknown_message is not None:
            message = self._unknown_message(name, names)  # type: ignore[arg-type]
        else:
            message = f"Unknown {self.kind} {name!r}; choose one of {list(names)}."
        return f"{message} {self.how_to_add}" if self.how_to_add else message
