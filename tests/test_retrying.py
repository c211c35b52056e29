"""The one retry policy (icr2_components/retrying.py): waits grow exponentially up to the cap, errors it is not
told to retry pass at once, and the final failure is raised (from the last error), never lost."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from icr2_components.models.served_model import RETRY_BACKOFF_S, ServedModelError, _request_json
from icr2_components.retrying import RetryPolicy

pytestmark = pytest.mark.unit


class Flaky:
    """Fails with ``error`` the first ``failures`` calls, then answers ``"ok"``."""

    def __init__(self, failures: int, error: type[BaseException] = ConnectionError) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return "ok"


def recording_policy(**options) -> tuple[RetryPolicy, list[float]]:
    waits: list[float] = []
    return RetryPolicy(sleep=waits.append, **options), waits


def test_retries_with_exponential_backoff_then_answers():
    policy, waits = recording_policy(max_retries=5, initial_backoff=0.5, max_backoff=30.0)
    seen = []
    call = Flaky(failures=3)
    result = policy.call(call, retry_if=lambda e: isinstance(e, ConnectionError),
                         on_retry=lambda attempt, error, delay: seen.append((attempt, str(error), delay)))
    assert result == "ok" and call.calls == 4
    assert waits == [0.5, 1.0, 2.0] == [policy.delay(n) for n in (1, 2, 3)]
    assert seen == [(1, "failure 1", 0.5), (2, "failure 2", 1.0), (3, "failure 3", 2.0)]


def test_call_async_awaits_the_same_attempts_and_waits_and_gives_up_the_same_way():
    import asyncio

    waits: list[float] = []

    async def record(delay: float) -> None:
        waits.append(delay)

    policy = RetryPolicy(max_retries=2, initial_backoff=0.5, max_backoff=30.0, async_sleep=record)
    flaky = Flaky(failures=2)

    async def flaky_call() -> str:
        return flaky()

    retry = {"retry_if": lambda e: isinstance(e, ConnectionError)}
    assert asyncio.run(policy.call_async(lambda: flaky_call(), **retry)) == "ok" and flaky.calls == 3
    assert waits == [0.5, 1.0]
    dead = Flaky(failures=10)

    async def dead_call() -> str:
        return dead()

    with pytest.raises(RuntimeError, match="gave up after 3 attempts") as caught:
        asyncio.run(policy.call_async(dead_call, give_up=lambda n, s, e: RuntimeError(f"gave up after {n} attempts"),
                                      **retry))
    assert isinstance(caught.value.__cause__, ConnectionError) and dead.calls == 3


def test_backoff_is_capped():
    policy, waits = recording_policy(max_retries=6, initial_backoff=1.0, max_backoff=5.0)
    policy.call(Flaky(failures=6), retry_if=lambda e: True)
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


def test_the_final_failure_is_raised_from_the_last_error():
    policy, waits = recording_policy(max_retries=2, initial_backoff=0.1, max_backoff=1.0)
    call = Flaky(failures=10)
    with pytest.raises(RuntimeError, match="gave up after 3 attempts") as raised:
        policy.call(call, retry_if=lambda e: isinstance(e, ConnectionError),
                    give_up=lambda attempts, seconds, error: RuntimeError(f"gave up after {attempts} attempts"))
    assert call.calls == 3 and waits == [0.1, 0.2]
    assert isinstance(raised.value.__cause__, ConnectionError) and str(raised.value.__cause__) == "failure 3"
    # without give_up the last error itself is raised
    with pytest.raises(ConnectionError, match="failure 3"):
        recording_policy(max_retries=2)[0].call(Flaky(failures=10), retry_if=lambda e: True)


def test_the_last_error_is_raised_with_its_own_cause():
    """A wrapped error (Haystack's PipelineRuntimeError around the reader's ServedModelError) keeps its cause when
    the retries run out: callers find what failed in that chain (compare records a failed request by it)."""

    def wrapped() -> None:
        try:
            raise ServedModelError("The LLM server answered 503")
        except ServedModelError as error:
            raise RuntimeError("component 'reader' failed") from error

    with pytest.raises(RuntimeError, match="component 'reader' failed") as raised:
        recording_policy(max_retries=1)[0].call(wrapped, retry_if=lambda e: isinstance(e.__cause__, ServedModelError))
    assert isinstance(raised.value.__cause__, ServedModelError)


def test_an_error_not_worth_retrying_passes_at_once():
    policy, waits = recording_policy(max_retries=5)
    call = Flaky(failures=1, error=ValueError)
    with pytest.raises(ValueError, match="failure 1"):
        policy.call(call, retry_if=lambda e: isinstance(e, ConnectionError))
    assert call.calls == 1 and waits == []


def test_zero_retries_is_one_attempt():
    policy, waits = recording_policy(max_retries=0)
    call = Flaky(failures=1)
    with pytest.raises(ConnectionError):
        policy.call(call, retry_if=lambda e: True)
    assert call.calls == 1 and waits == []


def test_repeat_while_returns_the_last_result_when_retries_run_out():
    policy, waits = recording_policy(max_retries=2, initial_backoff=0.2)
    left = [5, 3, 2, 1]  # e.g. documents still answered 429 after each send

    def send() -> int:
        return left.pop(0)

    assert policy.repeat_while(send, again=lambda n: n > 0) == 2  # three sends, then the caller reports the 2 left
    assert waits == [0.2, 0.4]
    assert policy.repeat_while(lambda: 0, again=lambda n: n > 0) == 0 and waits == [0.2, 0.4]


@pytest.mark.parametrize("bad", [{"max_retries": -1}, {"max_retries": True}, {"initial_backoff": -1.0}])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        RetryPolicy(**bad)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_served_model_request_to_a_dead_port_is_retried_with_backoff_then_named():
    # a real refused connection (nothing listens on the port): 2 retries wait 0.5 s + 1 s, then one line
    url = f"http://127.0.0.1:{closed_port()}/tokenize"
    started = time.monotonic()
    with httpx.Client() as client, pytest.raises(ServedModelError) as raised:
        _request_json(client, "POST", url, {"content": "x"}, timeout_s=5, retries=2)
    elapsed = time.monotonic() - started
    assert elapsed >= RETRY_BACKOFF_S * (1 + 2) - 0.05  # the backoff really happened
    assert elapsed < 10
    message = str(raised.value)
    assert url in message and "3 attempts" in message and "not reachable" in message
    assert isinstance(raised.value.__cause__, httpx.ConnectError)  # the last error travels with it
