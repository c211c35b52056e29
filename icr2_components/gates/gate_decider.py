"""How a TimeAwareRetrievalGate method decides: the :class:`GateDecider` base class and its registry.

A gate method (``ta_are``, ``vanilla``, ``threshold``, ``learned``, ``always``, ``never``) is one small class in one
file under ``gates/deciders/``, registered by name with :func:`register_gate_decider`. The gate looks its
``method`` up here and delegates: the decider writes its prompt (if it asks the model at all), asks the gate's model
through :class:`YesNoModel`, and turns the answer into a :class:`GateDecision`; the gate keeps the model, the
routing and the ``decision`` record.

Adding a method is one new file. Every module in ``gates/deciders/`` is imported (so registered) on the first
lookup; a decider defined elsewhere registers when its module is imported, which must happen before a pipeline
naming it is loaded.

Usage example:
```python
from icr2_components.gates import GateDecider, GateDecision, TimeAwareRetrievalGate, register_gate_decider

@register_gate_decider("contains_digit")
class ContainsDigitDecider(GateDecider):
    needs_model = False

    def decide(self, question, model):
        return GateDecision.fixed(any(character.isdigit() for character in question.query))

gate = TimeAwareRetrievalGate(method="contains_digit", model=None)
print(gate.run(query="Who won in 2025?")["decision"]["retrieve"])   # True
```
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar, cast

from icr2_components.gates.prompts import Demonstration
from icr2_components.registry import Registry

FIXED_SCORING = "fixed"
REPLY_SCORING = "reply"
DEFAULT_CUT = 0.5
"""P(yes) at or above which a prompted model's answer counts as yes (the `threshold` method moves it)."""


@dataclass(frozen=True)
class GateQuestion:
    """One query to route, with what this run says: the date, a P(yes) cut, and overrides of the method's own
    parameters (``gate.run(n_yes=...)``; a decider reads them through :meth:`GateDecider.parameters_for`)."""

    query: str
    today: _dt.date
    cut: float | None = None
    """The run's `threshold`: the P(yes) cut for this run (it wins over a calibrated or learned cut); None: none
    given."""
    overrides: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class YesNoAnswer:
    """A model's answer to one yes/no prompt: P(yes) and how it was obtained.

    ``p_yes`` is renormalised over yes/no (``next_token`` or ``sequence_logprob`` scoring from a local model,
    ``top_logprobs`` from a server's log-probabilities, with the generated ``reply`` kept), 1.0/0.0 for a parsed
    reply (``reply``), or None for a reply that says neither; such a reply goes where ``route_if_unparsed`` says
    (the gate's ``on_unparsed``). ``fixed`` answers belong to deciders that ask no model.
    """

    p_yes: float | None
    scoring: str
    reply: str | None = None
    answer_mass: float | None = None
    rendered_prompt: str | None = None
    reused_prefix_tokens: int = 0
    route_if_unparsed: bool = True

    @classmethod
    def fixed(cls, retrieve: bool) -> YesNoAnswer:
        """The answer of a decider that asks no model: P(yes) 1.0 or 0.0."""
        return cls(p_yes=1.0 if retrieve else 0.0, scoring=FIXED_SCORING)

    def says_yes(self, cut: float = DEFAULT_CUT) -> bool:
        """P(yes) reaches ``cut``; a reply that says neither yes nor no follows ``route_if_unparsed``."""
        if self.p_yes is None:
            return self.route_if_unparsed
        return self.p_yes >= cut

    def record_fields(self, cut: float | None) -> dict[str, Any]:
        """The fields the gate's ``decision`` output shows for this answer, in the order it shows them."""
        if self.scoring == FIXED_SCORING:
            return {"p_yes": self.p_yes, "scoring": self.scoring}
        if self.scoring == REPLY_SCORING:
            fields: dict[str, Any] = {} if self.rendered_prompt is None else {"rendered_prompt": self.rendered_prompt}
            fields.update(reply=self.reply, parsed=self.p_yes is not None, scoring=self.scoring, p_yes=self.p_yes)
            return fields
        scored: dict[str, Any] = {"p_yes": self.p_yes, "scoring": self.scoring, "answer_mass": self.answer_mass,
                                  "rendered_prompt": self.rendered_prompt, "threshold": cut,
                                  "reused_prefix_tokens": self.reused_prefix_tokens}
        if self.reply is not None:  # a server's generated tokens, whose log-probabilities gave p_yes
            scored["reply"] = self.reply
        return scored


class YesNoModel(Protocol):
    """The gate's model as a decider sees it: a local causal LM (logits or greedy reply) or a chat generator."""

    def ask(self, prompt: str) -> YesNoAnswer:
        """Ask ``prompt`` (a user turn) and return the model's yes/no answer."""
        ...


@dataclass(frozen=True)
class GateDecision:
    """What a decider decided for one query, and what the gate's ``decision`` output shows of how.

    ``cut`` is the P(yes) at or above which the answer counted as yes (shown as ``threshold`` with a
    probability); ``today`` is the date written in the prompt, if any.
    """

    retrieve: bool
    answer: YesNoAnswer
    cut: float | None = None
    prompt: str = ""
    demonstrations: tuple[Demonstration, ...] = ()
    excluded_demonstrations: int = 0
    today: _dt.date | None = None

    @classmethod
    def fixed(cls, retrieve: bool) -> GateDecision:
        """A decision made without asking a model."""
        return cls(retrieve=bool(retrieve), answer=YesNoAnswer.fixed(bool(retrieve)))

    @classmethod
    def at_cut(cls, answer: YesNoAnswer, cut: float = DEFAULT_CUT, **shown: Any) -> GateDecision:
        """Retrieve when the model's P(yes) reaches ``cut``; ``shown``: prompt, demonstrations, ... for the record."""
        return cls(retrieve=answer.says_yes(cut), answer=answer, cut=cut, **shown)

    def as_record(self, method: str) -> dict[str, Any]:
        """The gate's ``decision`` output (without ``retrieve`` and ``latency_s``, which the gate appends)."""
        record: dict[str, Any] = {
            "method": method, "today": None if self.today is None else self.today.isoformat(), "prompt": self.prompt,
            "demonstrations": [
                {"question": d.question, "label": d.label, "source": d.source} for d in self.demonstrations
            ],
            "excluded_demonstrations": self.excluded_demonstrations, "reply": None, "parsed": None, "answer_mass": None,
        }
        record.update(self.answer.record_fields(self.cut))
        return record


@dataclass(frozen=True)
class NoGateParameters:
    """The parameters of a method that has none of its own."""


def check_artifact_path(artifact: str | None) -> None:
    """A method parameter naming a gate artifact is a non-empty path or None (whether it exists: the method's check)."""
    if artifact is not None and (not isinstance(artifact, str) or not artifact.strip()):
        raise ValueError(f"artifact must be the path of a gate artifact (icr2 train-gate --out), got {artifact!r}.")


class GateDecider(ABC):
    """One gate method: its own parameters, its prompt (if any), its checks, and how it turns the model's answer
    into a decision.

    A method owns its parameters: ``Parameters`` is a frozen dataclass (validated in its ``__post_init__``) whose
    fields the gate accepts as init parameters (and YAML keys) and hands to this method only; the decider reads
    them from ``self.parameters`` (with a run's overrides: :meth:`parameters_for`), the device its own models go
    to from ``self.device``, and the run from :class:`GateQuestion`. It reads nothing else of the gate. Set the
    class flags the gate checks before it delegates: ``needs_model`` (the decider calls ``model.ask``; the gate
    then needs a local model, a server or a chat generator) and ``needs_logits`` (P(yes) must be a probability: a
    local model's logits or a server's log-probabilities, not a reply parsed by design).
    """

    name: ClassVar[str] = ""
    needs_model: ClassVar[bool] = True
    needs_logits: ClassVar[bool] = False
    Parameters: ClassVar[type] = NoGateParameters

    def __init__(self, parameters: Any = None, *, device: str | None = None) -> None:
        self.parameters = parameters if parameters is not None else self.Parameters()
        if not isinstance(self.parameters, self.Parameters):
            raise TypeError(f"{type(self).__name__} takes {self.Parameters.__name__}, not {type(parameters).__name__}.")
        self.device = device
        self.input_skips: dict[str, dict] = {}
        """Skip reports of what :meth:`warm_up` read, by input name (e.g. the TA-ARE pools)."""

    @classmethod
    def parameter_names(cls) -> tuple[str, ...]:
        """The init parameters (YAML keys) this method owns."""
        return tuple(f.name for f in dataclasses.fields(cls.Parameters))

    @classmethod
    def parameters_from(cls, values: Mapping[str, Any]) -> Any:
        """This method's parameters out of the gate's method parameters (keys of other methods are left out)."""
        return cls.Parameters(**{name: values[name] for name in cls.parameter_names() if name in values})

    def parameters_for(self, question: GateQuestion) -> Any:
        """The parameters with this run's overrides of them applied (validated again)."""
        overrides = {k: v for k, v in question.overrides.items() if k in self.parameter_names()}
        return dataclasses.replace(self.parameters, **overrides) if overrides else self.parameters

    # check and warm_up are optional hooks (a method with nothing to check or load keeps these), not abstract
    def check(self) -> None:  # noqa: B027
        """Reject what the parameters alone cannot (e.g. that a file exists: a stat, reading no file)."""

    def warm_up(self) -> None:  # noqa: B027
        """Load what the method needs besides the gate's model (files, embedders); called again, it does nothing."""

    @abstractmethod
    def decide(self, question: GateQuestion, model: YesNoModel | None) -> GateDecision:
        """Decide whether ``question`` needs retrieval; ``model`` is None when ``needs_model`` is False."""

    def model_to_ask(self, model: YesNoModel | None) -> YesNoModel:
        """``model``, which the gate hands to every decider whose ``needs_model`` is True.

        :raises TypeError: when it is None (this decider asks a model but was called without one).
        """
        if model is None:
            raise TypeError(f"The {self.name!r} gate method asks a model (needs_model is True) but was given none.")
        return model


_DECIDERS: Registry[type[GateDecider]] = Registry(
    "gate decider",
    ValueError,
    unknown_message=lambda name, names: (
        f"method must be one of the registered gate deciders {list(names)}, got {name!r}."
    ),
    how_to_add="A new method is a GateDecider subclass decorated with @register_gate_decider(name) (see "
    "icr2_components/gates/deciders/), imported before the gate is built.",
)
DeciderClass = TypeVar("DeciderClass", bound=type[GateDecider])


def register_gate_decider(name: str) -> Callable[[DeciderClass], DeciderClass]:
    """Class decorator: make a :class:`GateDecider` the gate's ``method=name``."""
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise ValueError(f"A gate decider's name must be a non-empty string without surrounding spaces, got {name!r}.")

    def register(cls: DeciderClass) -> DeciderClass:
        if not (isinstance(cls, type) and issubclass(cls, GateDecider)):
            raise TypeError(f"@register_gate_decider({name!r}) decorates GateDecider subclasses, not {cls!r}.")
        parameters = cls.Parameters
        if not (dataclasses.is_dataclass(parameters) and cast(Any, parameters).__dataclass_params__.frozen):
            raise TypeError(f"{cls.__name__}.Parameters must be a frozen dataclass (@dataclass(frozen=True)).")
        # The same class imported again (a module reloaded) replaces itself; another class may not take the name.
        _DECIDERS.register(name, cls)
        cls.name = name
        return cls

    return register


def gate_decider_names() -> tuple[str, ...]:
    """The registered gate methods, sorted (the built-ins and any registered since)."""
    _import_builtin_deciders()
    return _DECIDERS.names()


def gate_parameter_owners() -> dict[str, tuple[str, ...]]:
    """Every method parameter of the registered methods -> the methods that own it (``artifact``: learned,
    threshold)."""
    _import_builtin_deciders()
    owners: dict[str, list[str]] = {}
    for name in _DECIDERS.names():
        for parameter in _DECIDERS.get(name).parameter_names():
            owners.setdefault(parameter, []).append(name)
    return {parameter: tuple(names) for parameter, names in owners.items()}


def gate_decider_class(name: str) -> type[GateDecider]:
    """The decider registered as ``name``; a ValueError listing the registered names otherwise."""
    _import_builtin_deciders()
    return _DECIDERS.get(name)


def _import_builtin_deciders() -> None:
    # Imported on first use, not at module import: the decider modules import this one.
    importlib.import_module("icr2_components.gates.deciders")
