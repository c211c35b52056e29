"""Plumbing of ``icr2_components.concurrency`` and the backends' ``max_concurrency`` (no model, no server: the
calls here are plain functions and coroutines that sleep, so ordering, overlap, retries and interruption are what
is tested).
The same machinery on real answers from the llama.cpp server: tests/test_concurrent_requests.py."""

import asyncio
import threading
import time
from functools import partial

import pytest

from icr2_components.backends import BackendError
from icr2_components.backends.kind import backend_kind_class
from icr2_components.backends.pipelines import backend_from_dict, request_concurrency
from icr2_components.concurrency import FailureStreak, Job, Outcome, check_concurrency, ordered_calls
from icr2_components.errors import UserInputError

pytestmark = pytest.mark.unit

SERVED = {"kind": "served", "served_model": {"api_base_url": "http://127.0.0.1:8089/v1", "model": "m"}}


def test_outcomes_come_back_in_job_order_although_later_calls_finish_first():
    delays = [0.3, 0.0, 0.2, 0.0, 0.1, 0.0, 0.05, 0.0]
    jobs = [Job(i, (lambda d=d, i=i: (time.sleep(d), i)[1])) for i, d in enumerate(delays)]
    start = time.perf_counter()
    got = [o.value for o in ordered_calls(jobs, concurrency=4)]
    assert got == list(range(len(delays)))
    assert time.perf_counter() - start < sum(delays) * 0.8  # the sleeps overlapped


def test_at_most_concurrency_calls_run_at_once_and_jobs_without_call_pass_through():
    running, peak, lock = [0], [0], threading.Lock()

    def call():
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return "ran"

    jobs = [Job(i, call if i % 3 else None) for i in range(30)]
    outcomes = list(ordered_calls(jobs, concurrency=3))
    assert [o.key for o in outcomes] == list(range(30))
    assert [o.ran for o in outcomes] == [bool(i % 3) for i in range(30)]
    assert peak[0] == 3


def test_a_retryable_failure_is_retried_with_backoff_then_returned_not_raised():
    tries = {"flaky": 0, "dead": 0}

    def flaky():
        tries["flaky"] += 1
        if tries["flaky"] < 2:
            raise ConnectionError("first try fails")
        return "ok"

    def dead():
        tries["dead"] += 1
        raise ConnectionError("always fails")

    outcomes = list(ordered_calls([Job("flaky", flaky), Job("dead", dead)], concurrency=2,
                                  retry_if=lambda e: isinstance(e, ConnectionError), attempts=3,
                                  backoff_s=(0.01, 0.02)))
    assert (outcomes[0].value, outcomes[0].attempts, outcomes[0].failed) == ("ok", 2, False)
    assert outcomes[1].failed and isinstance(outcomes[1].error, ConnectionError) and outcomes[1].attempts == 3
    assert tries == {"flaky": 2, "dead": 3}


def test_an_error_that_is_not_retryable_is_tried_once():
    calls = []

    def bad():
        calls.append(1)
        raise ValueError("a bad question")

    (outcome,) = ordered_calls([Job(0, bad)], concurrency=1, retry_if=lambda e: isinstance(e, ConnectionError))
    assert isinstance(outcome.error, ValueError) and len(calls) == 1


def test_closing_the_generator_cancels_what_has_not_started():
    started = []

    def call(i):
        started.append(i)
        time.sleep(0.05)
        return i

    outcomes = ordered_calls((Job(i, lambda i=i: call(i)) for i in range(100)), concurrency=2)
    assert next(outcomes).value == 0
    outcomes.close()
    assert len(started) < 20  # the window, not the 100 jobs


async def _sleep_then(delay: float, value, record: list | None = None):
    if record is not None:
        record.append((value, threading.current_thread().name))
    await asyncio.sleep(delay)
    return value


def test_async_calls_overlap_on_the_event_loop_and_come_back_in_order():
    delays = [0.3, 0.0, 0.2, 0.0, 0.1, 0.0, 0.3, 0.0]
    seen: list = []
    jobs = [Job(i, partial(_sleep_then, d, i, seen)) for i, d in enumerate(delays)]
    start = time.perf_counter()
    got = [o.value for o in ordered_calls(jobs, concurrency=4)]
    assert got == list(range(len(delays)))
    assert time.perf_counter() - start < sum(delays) * 0.6  # awaited together, not one after another
    assert {thread for _, thread in seen} == {threading.current_thread().name}  # on the loop: no worker thread


def test_async_and_blocking_calls_share_the_slots():
    running, peak, lock = [0], [0], threading.Lock()

    def enter():
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])

    def leave():
        with lock:
            running[0] -= 1

    async def coroutine_call():
        enter()
        await asyncio.sleep(0.02)
        leave()
        return "async"

    def blocking_call():
        enter()
        time.sleep(0.02)
        leave()
        return "blocking"

    jobs = [Job(i, coroutine_call if i % 2 else blocking_call) for i in range(24)]
    outcomes = list(ordered_calls(jobs, concurrency=3))
    assert [o.value for o in outcomes] == ["async" if i % 2 else "blocking" for i in range(24)]
    assert peak[0] == 3


@pytest.mark.parametrize("concurrency", [1, 2])
def test_an_async_call_is_retried_with_the_same_policy(concurrency):
    tries = [0]

    async def flaky():
        tries[0] += 1
        if tries[0] < 3:
            raise ConnectionError("not yet")
        return "ok"

    (outcome,) = ordered_calls([Job("flaky", flaky)], concurrency=concurrency,
                               retry_if=lambda e: isinstance(e, ConnectionError), attempts=3, backoff_s=(0.01, 0.02))
    assert (outcome.value, outcome.attempts, outcome.failed) == ("ok", 3, False)


def test_closing_the_generator_cancels_async_calls_not_started():
    started: list = []
    outcomes = ordered_calls((Job(i, partial(_sleep_then, 0.05, i, started)) for i in range(100)), concurrency=2)
    assert next(outcomes).value == 0
    outcomes.close()
    assert len(started) < 20


def test_ctrl_c_landing_as_the_awaited_call_finishes_is_raised_after_the_running_calls_are_cancelled():
    # Ctrl-C in the event loop's iteration in which the awaited call finished leaves that call's done callback
    # (which stops the loop) queued: the clean-up must still wait for the cancelled calls and re-raise Ctrl-C, not
    # end with "Event loop stopped before Future completed" (found by CI in test_concurrent_requests' interruption)
    async def finishes_as_ctrl_c_lands():
        def ctrl_c():
            raise KeyboardInterrupt

        asyncio.get_running_loop().call_soon(ctrl_c)  # queued before this task's own done callbacks
        return "answered"

    cancelled = threading.Event()

    async def still_running():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    outcomes = ordered_calls([Job(0, finishes_as_ctrl_c_lands), Job(1, still_running)], concurrency=2)
    with pytest.raises(KeyboardInterrupt):
        next(outcomes)
    assert cancelled.is_set()


def test_a_call_returning_a_coroutine_instead_of_being_async_is_a_clear_error():
    (outcome,) = ordered_calls([Job(0, lambda: _sleep_then(0, 0))], concurrency=2)
    assert isinstance(outcome.error, TypeError) and "async function itself" in str(outcome.error)


def test_a_streak_of_failures_stops_the_run_with_the_last_error():
    streak = FailureStreak(3)
    failed = Outcome("k", error=RuntimeError("server down"), ran=True)
    streak.observe(failed)
    streak.observe(Outcome("k", value=1, ran=True))  # a success resets it
    streak.observe(failed)
    streak.observe(failed)
    with pytest.raises(RuntimeError, match="server down"):
        streak.observe(failed)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "4", None, 257, 10**6])
def test_concurrency_must_be_a_whole_number_from_one_to_its_ceiling(value):
    with pytest.raises(UserInputError, match="whole number from 1 to 256"):
        check_concurrency(value)


def test_a_backend_file_states_max_concurrency_or_gets_its_kinds_default():
    assert backend_from_dict(SERVED).concurrency == backend_kind_class("served").max_concurrency > 1
    assert backend_from_dict({**SERVED, "max_concurrency": 16}).concurrency == 16
    assert backend_kind_class("local").max_concurrency is None  # one at a time, in process
    assert backend_from_dict({"kind": "local"}).concurrency == 1
    with pytest.raises(UserInputError, match="max_concurrency must be a whole number"):
        backend_from_dict({**SERVED, "max_concurrency": 0})
    with pytest.raises(BackendError, match="answers one request at a time"):
        backend_from_dict({"kind": "local", "max_concurrency": 4})


def test_the_flag_overrides_the_backend_and_more_than_one_needs_a_served_backend():
    served = backend_from_dict({**SERVED, "max_concurrency": 8})
    assert request_concurrency(served) == 8
    assert request_concurrency(served, 2) == 2
    assert request_concurrency(None) == 1
    assert request_concurrency(backend_from_dict({"kind": "local"}), 1) == 1
    with pytest.raises(BackendError, match="needs a served backend"):
        request_concurrency(None, 4)
    with pytest.raises(UserInputError, match="--concurrency must be"):
        request_concurrency(served, 0)


@pytest.mark.parametrize("concurrency", [1, 2])
def test_calls_started_inside_a_running_event_loop_are_refused_at_once_not_spun_on(concurrency):
    """Started from a thread whose event loop runs (async code, Playwright's sync API), our loop cannot run: before,
    the retry on run_until_complete's refusal spun at 100% CPU forever."""

    async def answer():
        return "Paris"

    async def inside_a_loop():
        return [outcome.value for outcome in ordered_calls([Job("q1", answer)], concurrency=concurrency)]

    outcome: dict = {}

    def run():
        try:
            outcome["value"] = asyncio.run(inside_a_loop())
        except RuntimeError as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "ordered_calls spun inside a running event loop"
    assert "cannot start in a thread whose event loop is already running" in str(outcome.get("error"))
    # outside a running loop the same call answers
    assert [o.value for o in ordered_calls([Job("q1", answer)], concurrency=concurrency)] == ["Paris"]
