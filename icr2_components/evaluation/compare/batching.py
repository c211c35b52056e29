"""``icr2 compare --batch-size N``: answers generated N at a time, cached exactly as one at a time.

Compare plans its steps (questions x pipelines x context types) in a fixed order and writes them in that order
(``run._plan_steps``, ``concurrency.ordered_calls``). :func:`batched_jobs` keeps that order and changes only the
calls: a pipeline whose reader batches (``PipelineSpec.unbatched_because`` is None: ``LocalChatReader`` as the
last step) has its model calls grouped per (pipeline, open/controlled) N at a time, and the first of a group's
calls to run answers the whole group (``PipelineSpec.run_batch``: each question's steps up to the reader on
their own, then one ``generate`` for the N prompts, left-padded: in float32 the same greedy replies; a reader in
half precision is warned about, since some of its replies differ); the others take their share. Every other
call is left as it is. Since the steps and their order do not change, the cache file, resume after an
interruption (at most one unwritten group per pipeline is redone) and the report are those of N = 1. A
batch that fails with a question's own error (a prompt too long for the reader) is answered again one question
at a time, so each question gets its own error, as without batching.

Usage:
    >>> jobs = batched_jobs(_plan_steps(...), batch_size=8, max_new_tokens=16)
    >>> for outcome in ordered_calls(jobs, concurrency): ...   # in compare's order, as without batching
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from icr2_components.concurrency import Job
from icr2_components.errors import ComponentLoadError, find_in_causes
from icr2_components.models.served_model import ServedModelError

logger = logging.getLogger(__name__)


def check_batch_size(batch_size: Any) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"--batch-size must be a positive integer, got {batch_size!r}.")
    return batch_size


class _Batch:
    """Up to N steps of one pipeline and one open/controlled variant, answered by one ``run_batch``."""

    def __init__(self, spec, controlled: bool, max_new_tokens: int | None) -> None:
        self.spec, self.controlled, self.max_new_tokens = spec, controlled, max_new_tokens
        self.items: list[tuple[str, Any]] = []
        self.closed = False  # no step joins any more: its jobs may be handed on
        self._lock = threading.Lock()  # with --concurrency, several shares may be called at once
        self._answers: list[dict] | None = None
        self._fallback = False

    def add(self, query: str, documents) -> Any:
        index = len(self.items)
        self.items.append((query, documents))
        return lambda: self._share(index)

    def _share(self, index: int) -> dict:
        with self._lock:
            if self._answers is None and not self._fallback:
                try:
                    self._answers = self.spec.run_batch(self.items, self.controlled, max_new_tokens=self.max_new_tokens)
                except Exception as error:
                    # the pipeline cannot load, the server is down, or a bug: the step's own outcome says so
                    if isinstance(error, ComponentLoadError) or find_in_causes(error, ServedModelError) is not None:
                        raise
                    if find_in_causes(error, ValueError) is None:
                        raise
                    self._fallback = True  # a question's own problem: each answers alone, with its own error
        if self._fallback:
            query, documents = self.items[index]
            return self.spec.run(query, documents, self.controlled, max_new_tokens=self.max_new_tokens)
        return self._answers[index]


def batched_jobs(jobs: Iterable[Job], batch_size: int, max_new_tokens: int | None) -> Iterator[Job]:
    """The same jobs in the same order; the model calls of pipelines whose reader batches become shares of one
    batch of up to ``batch_size``. A job is handed on once its batch is complete (or the steps run out), so the
    planning reads ahead at most about ``batch_size`` steps per batching pipeline variant."""
    check_batch_size(batch_size)
    if batch_size == 1:
        yield from jobs
        return
    reasons: dict[tuple[str, bool], str | None] = {}
    open_batches: dict[tuple[str, bool], _Batch] = {}
    waiting: deque[tuple[Job, _Batch | None]] = deque()
    for job in jobs:
        step, batch = job.key, None
        if job.call is not None:
            group = (step.spec.hash, step.controlled)
            if group not in reasons:
                reasons[group] = step.spec.unbatched_because(step.controlled)
                if reasons[group] is not None:
                    logger.info("%s answers one question at a time: %s", step.spec.name, reasons[group])
                elif (caveat := step.spec.batch_caveat(step.controlled)) is not None:
                    logger.warning("%s answers %d questions at a time, but %s.", step.spec.name, batch_size, caveat)
            if reasons[group] is None:
                batch = open_batches.get(group)
                if batch is None:
                    batch = open_batches[group] = _Batch(step.spec, step.controlled, max_new_tokens)
                job = Job(step, batch.add(step.question.query, step.documents))
                if len(batch.items) == batch_size:
                    batch.closed = True
                    del open_batches[group]
        waiting.append((job, batch))
        while waiting and (waiting[0][1] is None or waiting[0][1].closed):
            yield waiting.popleft()[0]
    for batch in open_batches.values():
        batch.closed = True
    while waiting:
        yield waiting.popleft()[0]
