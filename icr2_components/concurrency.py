"""Several model requests at once, their results handed back in the order they were asked for.

A continuous-batching server (vLLM, TGI, llama.cpp's ``llama-server --parallel N``) answers N requests in about
the time of one; a client that waits for each answer leaves it mostly idle. :func:`ordered_calls` keeps up to
``concurrency`` calls running in a thread pool (``concurrent.futures``: the calls are blocking HTTP requests)
and yields each job's outcome in submission order, so a caller that writes results as they come (``icr2
compare``'s answer cache, ``icr2 label-retrieval-need``'s labels) writes exactly the lines, in exactly the order,
of a sequential run, and an interrupted run leaves an in-order prefix that a re-run resumes from.

A failing call is retried with exponential backoff (the package's one ``retrying.RetryPolicy``, on tenacity)
when ``retry_if(error)`` says so (a server that
timed out or answered 5xx after the client's own retries); the last error then comes back as the job's outcome, so
the caller records it as failed (never lost). :class:`FailureStreak` stops a run whose calls keep failing (the
server is down: every further request would fail too).

Usage:
    >>> from icr2_components.concurrency import Job, ordered_calls
    >>> jobs = (Job(key=n, call=lambda n=n: n * n) for n in range(5))
    >>> [outcome.value for outcome in ordered_calls(jobs, concurrency=3)]
    [0, 1, 4, 9, 16]
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from icr2_components.errors import UserInputError

K = TypeVar("K")
DEFAULT_ATTEMPTS = 3
"""Tries of one call (the first and two retries) before its error is the job's outcome."""
BACKOFF_S = (1.0, 20.0)
"""Exponential backoff between tries: the first wait and the longest."""
WINDOW_PER_SLOT = 4
"""Jobs planned ahead per concurrent slot: enough that a slow head of line does not idle the other slots, few
enough that an interruption throws away little finished work."""


def check_concurrency(value: object, source: str = "concurrency") -> int:
    """``value`` as a concurrency (a whole number >= 1), or a UserInputError naming ``source``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserInputError(f"{source} must be a whole number >= 1 (requests sent at once), got {value!r}.")
    return value


@dataclass
class Job(Generic[K]):
    """One unit of work: ``key`` identifies it to the caller; ``call`` (no arguments) is the request, or None
    for work that needs none (a cached answer): it is handed back in its place, in order, without a thread."""

    key: K
    call: Callable[[], Any] | None = None


@dataclass
class Outcome(Generic[K]):
    """What a job gave: ``value`` or ``error`` (after the retries), the tries made and the seconds they took."""

    key: K
    value: Any = None
    error: BaseException | None = None
    attempts: int = 0
    seconds: float = 0.0
    ran: bool = False

    @property
    def failed(self) -> bool:
        return self.error is not None


def _attempt(call: Callable[[], Any], retry_if: Callable[[BaseException], bool], attempts: int,
             backoff_s: tuple[float, float]) -> tuple[Any, BaseException | None, int, float]:
    """(value, error, tries, seconds) of ``call`` under the package's one retry policy (``retrying``)."""
    from icr2_components.retrying import RetryPolicy

    tries = [1]

    def count(attempt: int, error: BaseException | None, wait: float) -> None:
        tries[0] = attempt + 1

    start = time.perf_counter()
    policy = RetryPolicy(max_retries=attempts - 1, initial_backoff=backoff_s[0], max_backoff=backoff_s[1])
    try:
        value = policy.call(call, retry_if=retry_if, on_retry=count)
        return value, None, tries[0], time.perf_counter() - start
    except Exception as error:  # the last try's error (retryable or not): the caller records or raises it
        return None, error, tries[0], time.perf_counter() - start


def ordered_calls(jobs: Iterable[Job[K]], concurrency: int = 1,
                  retry_if: Callable[[BaseException], bool] = lambda error: False,
                  attempts: int = DEFAULT_ATTEMPTS, backoff_s: tuple[float, float] = BACKOFF_S,
                  ) -> Iterator[Outcome[K]]:
    """Run the jobs' calls, up to ``concurrency`` at once, and yield their outcomes in the jobs' order.

    ``jobs`` is read lazily, at most ``WINDOW_PER_SLOT * concurrency`` ahead of the outcome last yielded, so its
    planning may read state that the caller updates as outcomes arrive only for jobs that far behind. With
    ``concurrency=1`` no thread is started: each call runs when its outcome is due (a sequential run). Closing the
    generator (an exception in the caller, Ctrl-C) cancels the calls not started and waits for those running.
    """
    check_concurrency(concurrency)
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}.")

    def run(job: Job[K]) -> Outcome[K]:
        if job.call is None:
            return Outcome(job.key)
        value, error, tries, seconds = _attempt(job.call, retry_if, attempts, backoff_s)
        return Outcome(job.key, value, error, tries, seconds, ran=True)

    if concurrency == 1:
        for job in jobs:
            yield run(job)
        return
    window: deque[tuple[Job[K], Future | None]] = deque()
    source = iter(jobs)
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="icr2-request")
    try:
        exhausted = False
        while True:
            while not exhausted and len(window) < WINDOW_PER_SLOT * concurrency:
                job = next(source, None)
                if job is None:
                    exhausted = True
                    break
                window.append((job, pool.submit(run, job) if job.call is not None else None))
            if not window:
                return
            job, future = window.popleft()
            yield future.result() if future is not None else Outcome(job.key)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class FailureStreak:
    """Stops a run after ``limit`` failed calls in a row (the server is down or refusing everything): each failure
    is recorded first, and the run raises the last error instead of failing every further question slowly."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, int(limit))
        self.count = 0

    def observe(self, outcome: Outcome) -> None:
        if not outcome.ran:
            return
        self.count = self.count + 1 if outcome.failed else 0
        if self.count >= self.limit and outcome.error is not None:
            raise outcome.error


def streak_limit(concurrency: int) -> int:
    """Failures in a row that stop a run: more than one window of requests that were in flight together."""
    return max(4, 2 * concurrency)


__all__ = ["BACKOFF_S", "DEFAULT_ATTEMPTS", "FailureStreak", "Job", "Outcome", "check_concurrency", "ordered_calls",
           "streak_limit"]
