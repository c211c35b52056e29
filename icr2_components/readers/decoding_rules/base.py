"""What a decoding rule is: the `DecodingRule` base class, the parameters of a rule without any, shared helpers.

A rule picks the next token from the next-token logits of the same step computed twice, with the context
(``context_logits``, z_c: the prompt with the passages) and without it (``memory_logits``, z_m: the same question
alone). Every rule takes the reader's ``weight`` (its ``alpha``): 0 must return ``context_logits`` itself, bit for
bit, so that greedy decoding at weight 0 is the plain reader's. Whatever else a rule needs is its own frozen
dataclass of parameters, checked in its ``__post_init__``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from icr2_components.extras import extra_import

with extra_import("local") as torch_import:
    import torch


@dataclass(frozen=True)
class NoParameters:
    """The parameters of a rule that takes none besides the reader's weight."""


class DecodingRule(ABC):
    """
    One context-aware decoding rule; subclasses are registered by name with ``register_decoding_rule``.

    Usage example (a rule of one new file; `ContextAwareDecodingReader(technique="boost")` then uses it, and its
    parameter is the reader's keyword `boost_factor`):
    ```python
    from dataclasses import dataclass

    from icr2_components.readers.decoding_rules import DecodingRule, register_decoding_rule


    @dataclass(frozen=True)
    class BoostParameters:
        factor: float = 2.0

        def __post_init__(self):
            if self.factor <= 0:
                raise ValueError(f"boost: factor must be > 0, got {self.factor!r}.")


    @register_decoding_rule("boost")
    class Boost(DecodingRule):
        parameters_class = BoostParameters

        def combine(self, context_logits, memory_logits, weight):
            if weight == 0:
                return context_logits, {}
            return context_logits + weight * self.parameters.factor * (context_logits - memory_logits), {}
    ```
    """

    name: ClassVar[str] = ""
    """Set by ``register_decoding_rule``: the rule's name for the reader's ``technique``."""

    parameters_class: ClassVar[type] = NoParameters
    """The frozen dataclass of the rule's own parameters; its fields are the reader's ``<name>_<field>`` keywords."""

    def __init__(self, parameters: Any = None) -> None:
        if parameters is None:
            parameters = self.parameters_class()
        if not isinstance(parameters, self.parameters_class):
            raise TypeError(
                f"{type(self).__name__} takes {self.parameters_class.__name__}, got {type(parameters).__name__}."
            )
        self.parameters: Any = parameters  # an instance of parameters_class, whose fields the rule reads

    @abstractmethod
    def combine(
        self, context_logits: torch.Tensor, memory_logits: torch.Tensor, weight: float
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The logits to decode from (any leading batch shape ``(..., vocab)``) and the step's diagnostics
        (floats, batch-averaged; the reader reports their mean over the generated tokens)."""


def check_logit_pair(context_logits: torch.Tensor, memory_logits: torch.Tensor, weight: float, rule: str) -> None:
    """Refuse logits of two shapes (two tokenizers) and a negative weight, naming the rule."""
    if context_logits.shape != memory_logits.shape:
        raise ValueError(
            f"{rule}: context and memory logits must have one shape, got {tuple(context_logits.shape)} and "
            f"{tuple(memory_logits.shape)} (same model and tokenizer for both passes)."
        )
    if weight < 0:
        raise ValueError(f"{rule}: the weight must be >= 0, got {weight}.")


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of ``softmax(logits)`` over the last axis: shape ``(...)``, float32."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return -(log_probs.exp() * log_probs).sum(dim=-1)
