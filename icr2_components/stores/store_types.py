"""The store types a config can name, below the backends and the config that use them.

:mod:`~icr2_components.stores.config` reads a ``store:`` section through this registry (which dataclass holds its
keys), and :mod:`~icr2_components.stores.backend` registers each :class:`~icr2_components.stores.backend.StoreBackend`
into it; keeping the registry here lets the config and the backends import it without importing each other.

Usage:
    >>> from icr2_components.stores.store_types import store_backend, store_backend_names
    >>> store_backend_names()
    ('elasticsearch', 'in_memory')
    >>> store_backend("in_memory").settings_class().type
    'in_memory'
"""

from __future__ import annotations

from dataclasses import dataclass

from icr2_components.registry import Registry


@dataclass
class StoreSettings:
    """The ``store:`` section of an index config; each backend declares a subclass with its own keys.

    ``type`` names the backend; a subclass gives it that name as its default. Keys are type-checked when the
    config is read (an unknown key is an error listing the allowed ones), then :meth:`validate` checks values.
    """

    type: str

    def validate(self) -> None:
        """Raise :class:`~icr2_components.stores.config.ConfigError` naming the key for a value out of range."""


class UnknownStoreBackendError(ValueError):
    """No store backend is registered under the name; the message lists the registered ones."""


_STORE_BACKENDS: Registry[type] = Registry(
    "store type",
    UnknownStoreBackendError,
    unknown_message=lambda name, names: f"Unknown store type {name!r}; registered store types: {', '.join(names)}.",
    taken_message=lambda name, holder, newcomer: (
        f"Store type {name!r} is already served by {holder.__module__}.{holder.__name__}; "  # type: ignore[attr-defined]
        f"register {newcomer.__name__} under another name."  # type: ignore[attr-defined]
    ),
    how_to_add="A new store is a StoreBackend subclass decorated with @register_store_backend "
    "(icr2_components.stores.backend).",
)


def store_backend(name: str) -> type:
    """The backend class (a ``StoreBackend`` subclass) registered as ``name``; :class:`UnknownStoreBackendError`
    lists the registered names."""
    return _STORE_BACKENDS.get(name)


def store_backend_names() -> tuple[str, ...]:
    """The registered store types, sorted."""
    return _STORE_BACKENDS.names()


__all__ = ["StoreSettings", "UnknownStoreBackendError", "store_backend", "store_backend_names"]
