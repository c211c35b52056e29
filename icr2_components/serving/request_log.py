"""One JSON line per request answered by ``icr2 serve`` (``--log-requests PATH``, ``-`` for standard error).

Each line: ``time`` (UTC, ISO 8601), ``request_id`` (the ``X-Request-ID`` answered), ``trace_id`` (when tracing),
``method``, ``route``, ``pipeline`` (empty when none ran), ``status``, ``latency_ms``, ``prompt_tokens``,
``completion_tokens``, ``components_ms`` (each component's time) and, under an A/B split, ``arm``. The query and
the answer are written only with ``--log-content`` (``content=True``). The API key never is: the log is written from
what the server observed of the request (``observation.Observation``), which holds no header.
"""

from __future__ import annotations

import json
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from icr2_components.errors import UserInputError
from icr2_components.serving.observation import Observation


def log_line(observation: Observation, content: bool = False) -> dict[str, Any]:
    """The JSON object logged for ``observation`` (module docstring)."""
    line: dict[str, Any] = {
        "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "request_id": observation.request_id,
        "method": observation.method,
        "route": observation.route,
        "pipeline": observation.pipeline or "",
        "status": observation.status,
        "latency_ms": round((observation.latency_s or 0.0) * 1000, 2),
        **observation.tokens,
    }
    if observation.trace_id:
        line["trace_id"] = observation.trace_id
    if observation.components:
        line["components_ms"] = {name: round(s * 1000, 2) for name, s in observation.components.items()}
    if observation.arm:
        line["arm"] = observation.arm
    if content:
        line["query"] = observation.query
        line["answer"] = observation.answer
    return line


class RequestLog:
    """Writes the request lines to ``target`` (a path, appended to; ``-``: standard error), one flushed line per
    request, from any thread.

    :param content: also write each request's query and answer (off by default: they may be personal data).
    :raises UserInputError: the file cannot be opened for appending.
    """

    def __init__(self, target: str, content: bool = False) -> None:
        self.content = content
        self.target = target
        self._lock = threading.Lock()
        if target == "-":
            self._stream: IO[str] = sys.stderr
        else:
            try:
                Path(target).parent.mkdir(parents=True, exist_ok=True)
                self._stream = open(target, "a", encoding="utf-8")  # noqa: SIM115 - open for the server's life
            except OSError as error:
                raise UserInputError(f"--log-requests {target}: cannot append to it ({error.strerror}); give a "
                                     "writable file or - for standard error.") from error

    def write(self, observation: Observation) -> None:
        text = json.dumps(log_line(observation, self.content), ensure_ascii=False, default=str)
        with self._lock:
            self._stream.write(text + "\n")
            self._stream.flush()

    def close(self) -> None:
        if self._stream is not sys.stderr:
            self._stream.close()


__all__ = ["RequestLog", "log_line"]
