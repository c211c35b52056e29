"""What ``icr2 serve`` learns about one request while answering it, for its metrics, trace, log line and A/B record.

The outermost middleware (``serving.observability``) makes an ``Observation`` per HTTP request and puts it in a
context variable; the code that answers the request sees it through ``current()``: in the event loop, and in the
worker threads that run the pipeline (Starlette's thread pool and the streaming thread copy the context). The
pipeline wrapper notes which pipeline ran and the chat answer; the Haystack tracer (``serving.tracing``) notes each
component's time, the reader's tokens and the techniques' signals. Without observability (no middleware) there is
no observation and every ``note_*`` does nothing.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

_CURRENT: ContextVar[Observation | None] = ContextVar("icr2_serve_observation", default=None)


@dataclass
class Observation:
    """One request as observed: the route, then the pipeline, the components' seconds, tokens, technique signals,
    the answer (for the A/B log) and the status sent."""

    method: str
    path: str
    route: str
    started: float = field(default_factory=time.perf_counter)
    request_id: str | None = None
    trace_id: str | None = None
    pipeline: str | None = None
    status: int | None = None
    latency_s: float | None = None
    prompt_tokens: int | None = None  # None: no reader reported a count (e.g. a server's streamed reply)
    completion_tokens: int | None = None
    components: dict[str, float] = field(default_factory=dict)
    signals: dict[str, dict[str, Any]] = field(default_factory=dict)
    query: str | None = None
    answer: str | None = None
    passages: list[dict[str, Any]] | None = None
    user: str | None = None
    arm: str | None = None
    ab_model: str | None = None
    counted_replies: set[int] = field(default_factory=set)
    sinks: Any = None  # the app's Observability (metrics, tracer), for the Haystack tracer in worker threads

    @property
    def tokens(self) -> dict[str, int | None]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}


def current() -> Observation | None:
    """The observation of the request being answered in this context, or None (no observability, or no request)."""
    return _CURRENT.get()


def start(observation: Observation):
    """Make ``observation`` the current one; :returns: the token for ``_CURRENT.reset``."""
    return _CURRENT.set(observation)


def reset(token) -> None:
    _CURRENT.reset(token)


def note_pipeline(name: str, query: Any = None) -> None:
    """The pipeline that answers the current request (its metrics' and log line's ``pipeline``) and its query."""
    observation = _CURRENT.get()
    if observation is not None:
        observation.pipeline = name
        if isinstance(query, str):
            observation.query = query


def note_answer(text: str, outputs: dict[str, Any]) -> None:
    """The chat answer to the current request: its text and the passages it was given (``documents``, when the
    pipeline declares them), kept for the A/B log."""
    observation = _CURRENT.get()
    if observation is None:
        return
    observation.answer = text
    documents = outputs.get("documents")
    if isinstance(documents, list):
        observation.passages = [{"id": d.get("id"), "score": d.get("score"), "content": d.get("content")}
                                for d in documents if isinstance(d, dict)]


__all__ = ["Observation", "current", "note_answer", "note_pipeline"]
