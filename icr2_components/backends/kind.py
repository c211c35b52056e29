"""LLM backend kinds: where a pipeline's language model runs, one registered :class:`BackendKind` a file.

A backend file (``backends/*.yaml``) names its ``kind``; the kind's class reads the rest of the file into its
own frozen ``Settings`` and says what it gives the components (:attr:`BackendKind.provides`: the ``weights``, a
``tokenizer`` to count with, ``logprobs``). Components declare what they need and which role they play, and the
kind rewrites each one's pipeline entry for its role; nothing else branches on the kind:

- ``model_needs`` (a class attribute: need -> why, e.g. ``{"weights": "needs the weights: it reads attention"}``):
  a kind that does not provide a need refuses the component, naming why;
- ``backend_role``: ``chat_reader`` (answers: a kind may put another reader in its place), ``yes_no_asker`` (the
  gate: asks a model yes/no), ``white_box`` (loads the model itself), ``token_budget`` (counts tokens).

Adding a kind (say an Anthropic-style or a batch API) is one new file in this package (imported, so registered,
with it) or anywhere, imported before a backend file naming it is read:

```python
from dataclasses import dataclass
from icr2_components.backends import BackendKind, register_backend_kind

@register_backend_kind("echo")
class EchoBackend(BackendKind):
    provides = frozenset({"tokenizer"})

    @dataclass(frozen=True)
    class Settings:
        prefix: str = "echo"

    def describe(self) -> str:
        return f"echo ({self.settings.prefix})"
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from icr2_components.errors import UserInputError
from icr2_components.registry import Registry
from icr2_components.strict_mapping import at_key, check_known_keys, dataclass_from_mapping

NEEDS = ("weights", "tokenizer", "logprobs")
"""What a component may need of the model: its weights (attention, hidden states, full logits, head hooks), a
tokenizer to count budgets with, and log-probabilities of generated tokens (P(yes))."""
ROLES = ("chat_reader", "yes_no_asker", "white_box", "token_budget")


class BackendError(UserInputError):
    """A backend file is malformed, or a pipeline cannot run on the backend it was given."""


@dataclass(frozen=True)
class NoSettings:
    """A kind whose backend files carry nothing but ``kind``."""


class BackendKind:
    """One kind of place a language model runs. Subclasses set ``provides`` and ``Settings`` (a frozen dataclass
    of the backend file's other keys; validate in ``__post_init__``, raising ValueError) and override the role
    hooks they change; the defaults keep every component as it is."""

    name: ClassVar[str] = ""
    provides: ClassVar[frozenset[str]] = frozenset()
    Settings: ClassVar[type] = NoSettings
    max_concurrency: ClassVar[int | None] = None
    """How many requests this kind serves at once by default (None: one at a time, in order). A kind that can
    take concurrent requests (a server) sets it; a backend file may later override it."""

    def __init__(self, settings: Any = None) -> None:
        self.settings = settings if settings is not None else self.Settings()

    @classmethod
    def settings_from(cls, values: Mapping[str, Any], source: str) -> Any:
        """The kind's settings from a backend file's keys other than ``kind`` and ``description``."""
        allowed = {f.name for f in dataclasses.fields(cls.Settings)}
        with at_key(*sorted(set(values) - allowed, key=str)[:1]):
            check_known_keys(values, allowed, f"{source} (kind: {cls.name})", BackendError,
                             hint="A backend file also takes kind and description.")
        # each key checked against its declaration (strict types, no NaN or infinity, declared ranges), then the
        # Settings' own __post_init__ checks; any refusal is one BackendError line naming the file
        return dataclass_from_mapping(cls.Settings, dict(values), source, BackendError)

    # -- what the kind says about itself ---------------------------------------------------------------------

    def describe(self) -> str:
        return self.name

    def reader_label(self, model: str | None) -> str:
        """A short name of the reader a chat reader becomes here, for answer caches (``local:<model>``)."""
        return f"{self.name}:{model}"

    def local_model(self) -> str | None:
        """A model this process loads instead of the pipelines' own (None: keep theirs)."""
        return None

    def tokenizer_spec(self) -> str | None:
        """What a token-counting component's ``tokenizer`` becomes (None: keep its own)."""
        return None

    # -- the roles ---------------------------------------------------------------------------------------

    def follow(self, role: str, type_name: str, init_parameters: dict[str, Any]) -> dict[str, Any] | None:
        """The new ``{"type", "init_parameters"}`` entry of a component playing ``role``, or None to keep it."""
        if role not in ROLES:
            raise ValueError(f"backend_role must be one of {ROLES}, got {role!r}.")
        return getattr(self, f"follow_{role}")(type_name, dict(init_parameters))

    def follow_token_budget(self, type_name: str, init_parameters: dict[str, Any]) -> dict[str, Any] | None:
        """A token budget counts with the backend model's tokenizer (when the component counts at all)."""
        tokenizer = self.tokenizer_spec()
        if not init_parameters.get("tokenizer") or tokenizer is None:
            return None
        return {"type": type_name, "init_parameters": {**init_parameters, "tokenizer": tokenizer}}

    def follow_white_box(self, type_name: str, init_parameters: dict[str, Any]) -> dict[str, Any] | None:
        """A component that loads the model itself loads the backend's local model, when there is one."""
        model = self.local_model()
        if model and "model" in init_parameters:
            return {"type": type_name, "init_parameters": {**init_parameters, "model": model}}
        return None

    def follow_chat_reader(self, type_name: str, init_parameters: dict[str, Any]) -> dict[str, Any] | None:
        model = self.local_model()
        if model:
            return {"type": type_name, "init_parameters": {**init_parameters, "model": model}}
        return None

    def follow_yes_no_asker(self, type_name: str, init_parameters: dict[str, Any]) -> dict[str, Any] | None:
        model = self.local_model()
        if model:
            return {"type": type_name,
                    "init_parameters": {**init_parameters, "model": model, "chat_generator": None, "server": None}}
        return None


_KINDS: Registry[type[BackendKind]] = Registry(
    "backend kind",
    BackendError,
    unknown_message=lambda name, names: (
        f"kind must be one of the registered backend kinds {list(names)}, got {name!r}."
    ),
    how_to_add="A new kind is a BackendKind subclass decorated with @register_backend_kind(name) (see "
    "icr2_components/backends/), imported before the backend file is read.",
)
KindClass = TypeVar("KindClass", bound=type[BackendKind])


def register_backend_kind(name: str) -> Callable[[KindClass], KindClass]:
    """Class decorator: make a :class:`BackendKind` what ``kind: name`` in a backend file means."""
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise ValueError(f"A backend kind's name must be a non-empty string without surrounding spaces, got {name!r}.")

    def register(cls: KindClass) -> KindClass:
        if not (isinstance(cls, type) and issubclass(cls, BackendKind)):
            raise TypeError(f"@register_backend_kind({name!r}) decorates BackendKind subclasses, not {cls!r}.")
        settings = cls.Settings
        if not (dataclasses.is_dataclass(settings) and settings.__dataclass_params__.frozen):
            raise TypeError(f"{cls.__name__}.Settings must be a frozen dataclass (@dataclass(frozen=True)).")
        unknown = sorted(set(cls.provides) - set(NEEDS))
        if unknown:
            raise TypeError(f"{cls.__name__}.provides names {unknown}; what a kind provides is among {NEEDS}.")
        _KINDS.register(name, cls)
        cls.name = name
        return cls

    return register


def backend_kind_names() -> tuple[str, ...]:
    return _KINDS.names()


def backend_kind_class(name: str) -> type[BackendKind]:
    return _KINDS.get(name)


@dataclass(frozen=True)
class Backend:
    """A backend file read: its ``name`` (the file's stem), its kind (with the kind's settings) and its source."""

    name: str
    kind: BackendKind
    source: str = "<backend>"
    max_concurrency: int | None = None
    """Requests sent at once, as the backend file says (None: the kind's default)."""

    @property
    def kind_name(self) -> str:
        return self.kind.name

    @property
    def concurrency(self) -> int:
        """Requests to send at once: the file's ``max_concurrency``, else the kind's, else 1."""
        return self.max_concurrency or self.kind.max_concurrency or 1

    @property
    def settings(self) -> Any:
        return self.kind.settings

    @property
    def provides(self) -> frozenset[str]:
        return self.kind.provides

    def describe(self) -> str:
        return f"{self.name} ({self.kind.describe()})"

    def follow(self, component_class: type, init_parameters: dict[str, Any]) -> dict[str, Any] | None:
        """The entry ``component_class`` gets under this backend (by its declared ``backend_role``), or None."""
        role = getattr(component_class, "backend_role", None)
        if role is None:
            return None
        return self.kind.follow(role, f"{component_class.__module__}.{component_class.__name__}", init_parameters)

    def missing(self, component_class: type) -> dict[str, str]:
        """What ``component_class`` needs (``model_needs``) that this backend does not provide: need -> why."""
        needs = getattr(component_class, "model_needs", None) or {}
        return {need: why for need, why in needs.items() if need not in self.kind.provides}


__all__ = [
    "NEEDS",
    "ROLES",
    "Backend",
    "BackendError",
    "BackendKind",
    "NoSettings",
    "backend_kind_class",
    "backend_kind_names",
    "register_backend_kind",
]
