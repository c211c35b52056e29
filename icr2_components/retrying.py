"""The one retry policy: bounded attempts with exponential backoff, on tenacity.

Every network call the package repeats (Elasticsearch requests and the writer's resent documents, the served
model's tokenize requests) goes through :class:`RetryPolicy`, so "how often, how long apart, and what is said
when it gives up" is decided here once. The caller says which failures are worth another attempt (``retry_if``)
and how the final failure reads (``give_up``): that error is raised from the last one, so nothing is lost.

Usage example:
```python
from icr2_components.retrying import RetryPolicy

policy = RetryPolicy(max_retries=3, initial_backoff=1.0, max_backoff=30.0)   # waits 1 s, 2 s, 4 s
answer = policy.call(
    lambda: client.cluster.health(),
    retry_if=lambda error: isinstance(error, ConnectionError),
    give_up=lambda attempts, seconds, error: RuntimeError(f"no answer after {attempts} attempts ({error})"),
)
```
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import tenacity

T = TypeVar("T")

# on_retry(attempt that failed, its error or None for a result, seconds until the next attempt)
RetryCallback = Callable[[int, "BaseException | None", float], None]


@dataclass(frozen=True)
class RetryPolicy:
    """At most ``max_retries`` retries after the first attempt; the n-th retry waits
    ``min(max_backoff, initial_backoff * 2 ** (n - 1))`` seconds.

    :param max_retries: retries after the first attempt (0: one attempt only).
    :param initial_backoff: seconds before the first retry.
    :param max_backoff: the longest wait between two attempts.
    :param sleep: how to wait (``time.sleep``; a test may record the waits instead).
    :param async_sleep: how :meth:`call_async` waits (``asyncio.sleep``).
    """

    max_retries: int = 3
    initial_backoff: float = 1.0
    max_backoff: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be a non-negative integer, got {self.max_retries!r}.")
        if self.initial_backoff < 0 or self.max_backoff < 0:
            raise ValueError(f"backoff seconds must be >= 0, got {self.initial_backoff!r} and {self.max_backoff!r}.")

    def delay(self, retry: int) -> float:
        """Seconds before retry number ``retry`` (1-based)."""
        return min(self.max_backoff, self.initial_backoff * 2 ** (retry - 1))

    def _retrying(self, retry: tenacity.retry_base, on_retry: RetryCallback | None, async_mode: bool = False,
                  **options) -> tenacity.BaseRetrying:
        def before_sleep(state: tenacity.RetryCallState) -> None:
            if on_retry is not None:
                error = state.outcome.exception() if state.outcome is not None and state.outcome.failed else None
                on_retry(state.attempt_number, error, state.next_action.sleep if state.next_action else 0.0)

        settings = dict(
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            # tenacity's n-th wait is multiplier * 2 ** (n - 1), capped: the formula of delay()
            wait=tenacity.wait_exponential(multiplier=self.initial_backoff, max=self.max_backoff),
            retry=retry,
            before_sleep=before_sleep,
            **options,
        )
        if async_mode:  # the waits are awaited, not slept: the event loop serves other requests meanwhile
            return tenacity.AsyncRetrying(sleep=self.async_sleep, **settings)
        return tenacity.Retrying(sleep=self.sleep, **settings)

    def call(
        self,
        call: Callable[[], T],
        *,
        retry_if: Callable[[BaseException], bool],
        give_up: Callable[[int, float, BaseException], BaseException] | None = None,
        on_retry: RetryCallback | None = None,
    ) -> T:
        """``call()``, attempted again while it raises an error ``retry_if`` accepts.

        Any other error propagates at once. When the last attempt fails too, ``give_up(attempts, seconds,
        last_error)`` is raised from the last error (without ``give_up``, the last error itself).
        """
        start = time.monotonic()
        retrying = self._retrying(tenacity.retry_if_exception(retry_if), on_retry)
        try:
            return retrying(call)
        except tenacity.RetryError as exhausted:
            last = exhausted.last_attempt
        # raised outside the except block: the error's own cause chain (e.g. the ServedModelError under Haystack's
        # PipelineRuntimeError, which callers look for) stays intact, with no RetryError context
        raise _final_error(last, start, give_up)

    async def call_async(
        self,
        call: Callable[[], Awaitable[T]],
        *,
        retry_if: Callable[[BaseException], bool],
        give_up: Callable[[int, float, BaseException], BaseException] | None = None,
        on_retry: RetryCallback | None = None,
    ) -> T:
        """:meth:`call` for a coroutine: ``await call()``, attempted again on the same terms, the waits awaited
        (``asyncio.sleep``) so other requests go on meanwhile. The same attempts, waits and final error."""
        start = time.monotonic()
        retrying = self._retrying(tenacity.retry_if_exception(retry_if), on_retry, async_mode=True)
        async def attempt() -> T:  # tenacity awaits only a coroutine function's result, not a lambda's
            return await call()

        try:
            return await retrying(attempt)
        except tenacity.RetryError as exhausted:
            last = exhausted.last_attempt
        raise _final_error(last, start, give_up)

    def repeat_while(
        self, call: Callable[[], T], *, again: Callable[[T], bool], on_retry: RetryCallback | None = None
    ) -> T:
        """``call()``, repeated while ``again(result)`` (e.g. some documents were answered 429); the last result
        is returned either way, and the caller reports what it still holds. Errors propagate at once."""
        retrying = self._retrying(
            tenacity.retry_if_result(again), on_retry, retry_error_callback=lambda state: state.outcome.result()
        )
        return retrying(call)


def _final_error(last: tenacity.Future, start: float,
                 give_up: Callable[[int, float, BaseException], BaseException] | None) -> BaseException:
    """What a call raises once its attempts are spent: the last error, or ``give_up``'s error caused by it."""
    error = last.exception()
    if give_up is None:
        return error
    final = give_up(last.attempt_number, time.monotonic() - start, error)
    final.__cause__ = error  # as `raise ... from error`
    return final
