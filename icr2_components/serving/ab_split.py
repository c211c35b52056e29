"""Online A/B: ``icr2 serve vanilla_rag rap --ab 'vanilla_rag=0.9,rap=0.1' --ab-model rag --ab-log ab.jsonl``.

The A/B model (``rag``) is one more model of the OpenAI-compatible API; each chat request to it goes to one arm
(a served pipeline) with the arm's share of the traffic: by a hash of the user id when the request carries one
(OpenAI's ``user`` field, else the ``X-ICR2-User`` header), so a user always gets the same arm (sticky); at random
when it carries none. Each answered request is appended to the A/B log (``ABLog``: arm, answer, passages, latency,
tokens; format and comparison in ``evaluation.compare.ab_log``), written and fsynced before the answer's last byte
is sent, so a kill loses no request a client got an answer to. ``icr2 compare --ab-log PATH`` reports the arms.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from icr2_components.errors import UserInputError
from icr2_components.evaluation.compare.ab_log import repair_torn_tail
from icr2_components.serving.observation import Observation

USER_HEADER = "x-icr2-user"
_SCALE = float(2**64)


@dataclass(frozen=True)
class ABSplit:
    """The arms (pipeline names) and their shares of the A/B model's traffic (summing to 1)."""

    model: str
    arms: tuple[tuple[str, float], ...]

    @classmethod
    def parse(cls, text: str, model: str, served: list[str] | tuple[str, ...] | None = None) -> ABSplit:
        """``'vanilla_rag=0.9,rap=0.1'`` (weights; normalised to shares, so ``9,1`` and percentages work too).

        :raises UserInputError: the text is malformed, a weight is not a positive number, an arm is named twice or
            is not a served pipeline, or the model name is a served pipeline's.
        """
        arms: list[tuple[str, float]] = []
        for part in (p.strip() for p in str(text).split(",")):
            name, sep, weight = part.partition("=")
            name = name.strip()
            try:
                value = float(weight)
            except ValueError:
                value = float("nan")
            if not sep or not name or not value > 0 or value == float("inf"):
                raise UserInputError(f"--ab {text!r}: each arm is PIPELINE=WEIGHT with a positive weight, e.g. "
                                     f"'vanilla_rag=0.9,rap=0.1'; got {part!r}.")
            if any(name == existing for existing, _ in arms):
                raise UserInputError(f"--ab {text!r}: the arm {name!r} is named twice.")
            arms.append((name, value))
        if len(arms) < 2:
            raise UserInputError(f"--ab {text!r}: an A/B split needs at least two arms.")
        if served is not None:
            missing = [name for name, _ in arms if name not in served]
            if missing:
                raise UserInputError(f"--ab: {missing[0]!r} is not a served pipeline; serve it too (served: "
                                     f"{list(served)}).")
            if model in served:
                raise UserInputError(f"--ab-model {model!r} is a served pipeline's name; give the A/B model its own "
                                     "name (e.g. rag).")
        if not model or not model.strip():
            raise UserInputError("--ab-model: give the A/B model a name (e.g. rag).")
        total = sum(weight for _, weight in arms)
        return cls(model=model, arms=tuple((name, weight / total) for name, weight in arms))

    def arm_for(self, user: str | None) -> str:
        """The arm of a request: sticky by ``user`` (a SHA-256 of the model and the user id, as a number in
        [0, 1)), random without one."""
        if user:
            digest = hashlib.sha256(f"{self.model}\0{user}".encode()).digest()
            point = int.from_bytes(digest[:8], "big") / _SCALE
        else:
            point = random.random()
        cumulative = 0.0
        for name, share in self.arms:
            cumulative += share
            if point < cumulative:
                return name
        return self.arms[-1][0]


def user_hash(user: str | None) -> str | None:
    """The user id as logged: a short SHA-256 (the log is for comparing arms, not for finding people)."""
    return None if not user else hashlib.sha256(user.encode()).hexdigest()[:16]


class ABLog:
    """The append-only A/B log: one JSON line per answered A/B request, flushed and fsynced before the answer's
    last byte goes out. Opening it cuts a torn last line a kill left (``torn_lines_cut`` counts it).

    :raises UserInputError: the file cannot be opened for appending.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.torn_lines_cut = repair_torn_tail(self.path)
            self._handle = open(self.path, "ab")  # noqa: SIM115 - open for the server's life
        except OSError as error:
            raise UserInputError(f"--ab-log {path}: cannot append to it ({error.strerror}); give a writable "
                                 "file.") from error

    def record(self, observation: Observation) -> dict[str, Any]:
        """The log record of an answered A/B request."""
        return {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), "request_id": observation.request_id,
                "model": observation.ab_model, "arm": observation.arm, "user": user_hash(observation.user),
                "status": observation.status, "latency_ms": round((observation.latency_s or 0.0) * 1000, 3),
                **observation.tokens, "query": observation.query, "answer": observation.answer,
                "passages": observation.passages or []}

    def append(self, observation: Observation) -> None:
        """Write the request's record, flush and fsync it (blocking: call it from a worker thread)."""
        line = (json.dumps(self.record(observation), ensure_ascii=False, default=str) + "\n").encode("utf-8")
        with self._lock:
            self._handle.write(line)
            self._handle.flush()
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        with self._lock:
            self._handle.close()


__all__ = ["USER_HEADER", "ABLog", "ABSplit", "user_hash"]
