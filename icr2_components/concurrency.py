"""Several model requests at once, their results handed back in the order they were asked for.

A continuous-batching server (vLLM, TGI, llama.cpp's ``llama-server --parallel N``) answers N requests in about
the time of one; a client that waits for each answer leaves it mostly idle. :func:`ordered_calls` keeps up to
``concurrency`` calls running on one asyncio event loop (an ``asyncio.Semaphore`` over the calls): a job whose
``call`` is an ``async def`` function (a component's or a pipeline's ``run_async``, e.g.
``functools.partial(pipeline.run_async, data)``) is awaited there, so its requests overlap on the loop; a plain
blocking function (an in-process reader) runs in one of ``concurrency`` worker threads (``asyncio.to_thread``).
It yields each job's outcome in submission order, so a caller that writes results as they come (``icr2
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

import asyncio
import inspect
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
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


MAX_CONCURRENCY = 256
"""More requests at once than any server here has slots for: a larger value is a typo, refused."""


def check_concurrency(value: object, source: str = "concurrency") -> int:
    """``value`` as a concurrency (a whole number from 1 to ``MAX_CONCURRENCY``), or a UserInputError naming
    ``source``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONCURRENCY:
        raise UserInputError(f"{source} must be a whole number from 1 to {MAX_CONCURRENCY} (requests sent at once), "
                             f"got {value!r}.")
    return value


@dataclass
class Job(Generic[K]):
    """One unit of work: ``key`` identifies it to the caller; ``call`` (no arguments) is the request: a plain
    function, or an ``async def`` function (or a ``functools.partial`` of one) whose coroutine is awaited; None
    for work that needs none (a cached answer): it is handed back in its place, in order, without a call."""

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


def is_async_call(call: Callable[[], Any]) -> bool:
    """Whether ``call`` is an ``async def`` function (``inspect`` sees through ``functools.partial``)."""
    return inspect.iscoroutinefunction(call)


def _not_awaited(value: Any) -> Any:
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited: closed, so Python does not warn about it at exit
        raise TypeError("A job's call returned an awaitable: give the async function itself (or a functools.partial "
                        "of it) as the call, not a function that returns its coroutine.")
    return value


class _Tries:
    """Counts a call's tries for its outcome (the policy's on_retry sees each failed try)."""

    def __init__(self) -> None:
        self.count = 1

    def __call__(self, attempt: int, error: BaseException | None, wait: float) -> None:
        self.count = attempt + 1


def _policy(attempts: int, backoff_s: tuple[float, float]):
    from icr2_components.retrying import RetryPolicy

    return RetryPolicy(max_retries=attempts - 1, initial_backoff=backoff_s[0], max_backoff=backoff_s[1])


def _outcome(job: Job[K], value: Any, error: BaseException | None, tries: _Tries, start: float) -> Outcome[K]:
    return Outcome(job.key, value, error, tries.count, time.perf_counter() - start, ran=True)


def _attempt(job: Job[K], retry_if: Callable[[BaseException], bool], attempts: int,
             backoff_s: tuple[float, float]) -> Outcome[K]:
    """The outcome of a plain ``call`` under the package's one retry policy (``retrying``), in this thread."""
    tries, start = _Tries(), time.perf_counter()
    try:
        value = _policy(attempts, backoff_s).call(lambda: _not_awaited(job.call()), retry_if=retry_if,
                                                  on_retry=tries)
    except Exception as error:  # the last try's error (retryable or not): the caller records or raises it
        return _outcome(job, None, error, tries, start)
    return _outcome(job, value, None, tries, start)


async def _attempt_async(job: Job[K], retry_if: Callable[[BaseException], bool], attempts: int,
                         backoff_s: tuple[float, float], slots: asyncio.Semaphore) -> Outcome[K]:
    """The outcome of ``call`` on the event loop, holding one of the ``slots`` through its tries (the same
    policy, its waits awaited): an async call awaited, a plain one in a worker thread."""
    async with slots:
        tries, start = _Tries(), time.perf_counter()
        if is_async_call(job.call):
            one_try = job.call
        else:
            async def one_try() -> Any:
                return _not_awaited(await asyncio.to_thread(job.call))
        try:
            value = await _policy(attempts, backoff_s).call_async(one_try, retry_if=retry_if, on_retry=tries)
        except Exception as error:  # as in _attempt
            return _outcome(job, None, error, tries, start)
        return _outcome(job, value, None, tries, start)


def ordered_calls(jobs: Iterable[Job[K]], concurrency: int = 1,
                  retry_if: Callable[[BaseException], bool] = lambda error: False,
                  attempts: int = DEFAULT_ATTEMPTS, backoff_s: tuple[float, float] = BACKOFF_S,
                  ) -> Iterator[Outcome[K]]:
    """Run the jobs' calls, up to ``concurrency`` at once, and yield their outcomes in the jobs' order.

    ``jobs`` is read lazily, at most ``WINDOW_PER_SLOT * concurrency`` ahead of the outcome last yielded, so its
    planning may read state that the caller updates as outcomes arrive only for jobs that far behind. With
    ``concurrency=1`` each call runs when its outcome is due (a sequential run): a plain function in this thread,
    an async one on an event loop of this generator's. Closing the generator (an exception in the caller, Ctrl-C)
    cancels the calls not started and waits for those running.
    """
    check_concurrency(concurrency)
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}.")
    loop = asyncio.new_event_loop()
    # blocking calls get as many threads as there are slots, named for what they do
    loop.set_default_executor(ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="icr2-request"))
    slots = asyncio.Semaphore(concurrency)
    window: deque[tuple[Job[K], asyncio.Task | None]] = deque()
    awaited: asyncio.Task | None = None  # the task whose outcome is due: out of the window, still to be waited for
    try:
        if concurrency == 1:
            for job in jobs:
                if job.call is None:
                    yield Outcome(job.key)
                elif is_async_call(job.call):
                    _refuse_inside_a_running_loop()
                    yield loop.run_until_complete(_attempt_async(job, retry_if, attempts, backoff_s, slots))
                else:
                    yield _attempt(job, retry_if, attempts, backoff_s)
            return
        _refuse_inside_a_running_loop()
        source = iter(jobs)
        exhausted = False
        while True:
            while not exhausted and len(window) < WINDOW_PER_SLOT * concurrency:
                job = next(source, None)
                if job is None:
                    exhausted = True
                    break
                task = None
                if job.call is not None:
                    task = loop.create_task(_attempt_async(job, retry_if, attempts, backoff_s, slots))
                window.append((job, task))
            if not window:
                return
            job, awaited = window.popleft()
            yield loop.run_until_complete(awaited) if awaited is not None else Outcome(job.key)
    finally:
        tasks = [awaited, *(task for _, task in window)]
        pending = [task for task in tasks if task is not None and not task.done()]
        for task in pending:
            task.cancel()
        if not _loop_runs_in_this_thread():  # else ours never ran (refused above): nothing to wait for
            if pending:  # the cancelled tasks end; a blocking call already in a thread finishes first
                _run_to_the_end(loop, asyncio.gather(*pending, return_exceptions=True))
            _run_to_the_end(loop, loop.shutdown_default_executor())
        loop.close()


def _loop_runs_in_this_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _refuse_inside_a_running_loop() -> None:
    """Our own event loop cannot run where another one already does: ``run_until_complete`` refuses every time (and a
    retry on it would spin forever), so say so once, before any call starts."""
    if _loop_runs_in_this_thread():
        raise RuntimeError("these calls run their own event loop and cannot start in a thread whose event loop is "
                           "already running (async code, a notebook cell, Playwright's sync API); call them from a "
                           "worker thread, or await the pipeline's run_async instead")


def _run_to_the_end(loop: asyncio.AbstractEventLoop, awaitable) -> Any:
    """``loop.run_until_complete`` that survives a stale stop: when Ctrl-C lands in the loop's iteration in which
    the awaited task finished, that task's done callback (which stops the loop) is already queued, and the next
    ``run_until_complete`` would end at once with "Event loop stopped before Future completed"."""
    future = asyncio.ensure_future(awaitable, loop=loop)
    while True:
        try:
            return loop.run_until_complete(future)
        except RuntimeError:
            if future.done():
                raise


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


__all__ = ["BACKOFF_S", "DEFAULT_ATTEMPTS", "FailureStreak", "Job", "Outcome", "check_concurrency", "is_async_call",
           "ordered_calls", "streak_limit"]
