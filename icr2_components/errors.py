"""Errors that callers tell apart by class: a request the model cannot take, as opposed to a failure of ours.

``icr2 serve`` answers a ``ContextTooLongError`` or ``MissingContextError`` found anywhere in an exception's cause chain
with a 4xx (Haystack
wraps a component's error in ``PipelineRuntimeError``, keeping the original as ``__cause__``) and every other
failure with 500; ``icr2 compare`` records such an answer as an error and goes on with the next question.

``Icr2Error`` is the base of errors a user causes and can fix (a bad input, a missing file or model, a step to run
first): the ``icr2`` command prints its message as one line ``icr2 <command>: error: <message>`` and exits 1, so
the message must name the input and what to do. ``UserInputError`` is the same for a bad value (it is also a
``ValueError``, so callers that catch ``ValueError`` keep working).
"""

from __future__ import annotations


class Icr2Error(Exception):
    """An error the user can fix; its message names the input and what to do (the CLI prints it as one line)."""


class UserInputError(Icr2Error, ValueError):
    """A bad value, file or name given by the user (a ``ValueError`` too)."""


class ContextTooLongError(UserInputError):
    """The prompt (question plus passages) does not fit the model's context window; the message names the limit."""

    def __init__(self, message: str, prompt_tokens: int | None = None, limit: int | None = None) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.limit = limit


class MissingContextError(UserInputError):
    """A context-contrasting technique (CAD, ACD, COIECD) was run without a context to contrast: in a served
    pipeline, usually a retrieval that found nothing for the question."""


class ConfigError(UserInputError):
    """A configuration file or mapping (an index config, its ``corpus:`` or ``store:`` section) is invalid; the
    message names the file, the key and what is allowed."""


class ComponentLoadError(Icr2Error):
    """A pipeline's component cannot load (its model, index or artifact is missing or broken): no question can be
    answered, so a run stops at once instead of recording every question as failed."""


def find_in_causes(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of ``kind`` in ``error``'s ``__cause__``/``__context__`` chain (itself first), else None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:  # a cycle in the chain is possible, if rare
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


__all__ = [
    "ComponentLoadError",
    "ConfigError",
    "ContextTooLongError",
    "Icr2Error",
    "MissingContextError",
    "UserInputError",
    "find_in_causes",
]
