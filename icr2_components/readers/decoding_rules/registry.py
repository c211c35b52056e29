"""The decoding rules by name: ``register_decoding_rule`` adds one, ``decoding_rule`` builds one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

from icr2_components.readers.decoding_rules.base import DecodingRule
from icr2_components.registry import Registry, qualified_name


class UnknownDecodingRuleError(ValueError):
    """No decoding rule is registered under the name asked for."""


_RULES: Registry[type[DecodingRule]] = Registry(
    "decoding rule",
    UnknownDecodingRuleError,
    taken_message=lambda name, holder, newcomer: (
        f"The decoding rule name {name!r} is taken by {qualified_name(holder)}."
    ),
)


def register_decoding_rule(name: str) -> Callable[[type[DecodingRule]], type[DecodingRule]]:
    """Class decorator: register a ``DecodingRule`` subclass as ``name`` (the reader's ``technique``).

    ``name`` prefixes the rule's parameters in the reader (``<name>_<field>``), so it must be a lowercase
    identifier; registering a second class under a taken name is refused.
    """
    if not isinstance(name, str) or not name.isidentifier() or name != name.lower() or name == "none":
        raise ValueError(
            f"A decoding rule's name must be a lowercase identifier other than 'none' (plain decoding), got {name!r}."
        )

    def register(rule_class: type[DecodingRule]) -> type[DecodingRule]:
        if not (isinstance(rule_class, type) and issubclass(rule_class, DecodingRule)):
            raise TypeError(f"register_decoding_rule({name!r}) decorates DecodingRule subclasses, got {rule_class!r}.")
        parameters = rule_class.parameters_class
        if not (dataclasses.is_dataclass(parameters) and cast(Any, parameters).__dataclass_params__.frozen):
            raise TypeError(f"{rule_class.__name__}.parameters_class must be a frozen dataclass, got {parameters!r}.")
        _RULES.register(name, rule_class)
        rule_class.name = name
        return rule_class

    return register


def decoding_rule_names() -> list[str]:
    """The registered rules' names, sorted."""
    return list(_RULES.names())


def decoding_rule_class(name: str) -> type[DecodingRule]:
    """The rule class registered as ``name``; an unknown name raises, listing the registered ones."""
    return _RULES.get(name)


def decoding_rule(name: str, parameters: Any = None) -> DecodingRule:
    """The rule ``name`` with ``parameters`` (its parameters class; its defaults when None)."""
    return decoding_rule_class(name)(parameters)
