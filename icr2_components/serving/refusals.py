"""Which pipeline errors a client caused: they are answered 4xx with a reason instead of 500.

A request can be valid JSON and still be one the model cannot take: its question and passages make a prompt
longer than the reader's context (``ContextTooLongError``). The client must shorten it, so the server answers
413 with the reader's message, which names the prompt length and the limit. A context-aware decoding pipeline
whose retrieval found nothing for the question has no context to contrast (``MissingContextError``): 422. Every other
exception stays a 500:
a plain ``ValueError`` may as well be a misconfigured component, so only the classes listed here are mapped.
"""

from __future__ import annotations

from fastapi import HTTPException

from icr2_components.errors import ContextTooLongError, MissingContextError, find_in_causes

# exception class (searched through the cause chain) -> (HTTP status, error kind in the JSON body)
CLIENT_ERRORS: dict[type[BaseException], tuple[int, str]] = {
    ContextTooLongError: (413, "context_too_long"),
    # A decoding technique that contrasts with the context got none (the retrieval found nothing to show).
    MissingContextError: (422, "missing_context"),
}


class RequestRefused(HTTPException):
    """An HTTP error carrying the JSON ``error`` kind, so the app's handler can answer ``{error, reason, status}``."""

    def __init__(self, status_code: int, error: str, reason: str) -> None:
        super().__init__(status_code=status_code, detail=reason)
        self.error = error


def refusal_for(error: BaseException) -> RequestRefused | None:
    """The 4xx answer for an input-caused failure (found anywhere in the cause chain), None for anything else."""
    for kind, (status, name) in CLIENT_ERRORS.items():
        cause = find_in_causes(error, kind)
        if cause is not None:
            return RequestRefused(status, name, str(cause))
    return None


__all__ = ["CLIENT_ERRORS", "RequestRefused", "refusal_for"]
