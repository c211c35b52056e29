"""Streaming bulk writer for whole KILT dumps (about 36M passages) into Elasticsearch.

What it guarantees:

- **bounded memory**: the documents are an iterable consumed chunk by chunk; at most
  ``thread_count * 2 + 1`` chunks of ``batch_size`` documents are held at once (sent from ``thread_count``
  threads, confirmed in stream order), however long the stream;
- **near the node's ceiling**: each document is serialised once (orjson when installed) into its NDJSON
  lines, and a chunk is posted as those bytes joined, the way a replay of pre-serialised bulk bodies (the
  ceiling in ``bench/indexing.py``) posts them; only the answer's ``errors`` flag and per-item statuses are
  read back;
- **idempotent**: every document is sent with op_type ``index`` and its deterministic id as ``_id``, so a
  re-run overwrites instead of duplicating;
- **fast load settings**: ``refresh_interval: -1`` and ``number_of_replicas: 0`` (``load_replicas``; None keeps
  the index's replicas, for a cluster that must survive a node loss mid-load) during the load, the
  previous values restored afterwards, on failure too. The previous values are also kept in the index's
  mapping ``_meta`` while the load runs, so a run killed outright (SIGKILL) is repaired by the next run;
- **resumable**: a JSON checkpoint (position in the stream, passages confirmed written, last id, config
  fingerprint) is written every ``checkpoint_every`` chunks and at least every ``checkpoint_seconds`` (a chunk
  is confirmed as soon as Elasticsearch answers it), so a load killed at any moment redoes about that many
  seconds of work (tests/test_elasticsearch_writer.py kills ``icr2 index`` with SIGKILL); a re-run skips the confirmed
  prefix of the
  (deterministic) stream, checks that the id where it stopped is the same, and refuses to resume when the
  config fingerprint differs;
- **one corpus per index**: the stream's fingerprint is recorded in the index's ``_meta`` at its first load; a
  load of another corpus or config into it is refused before anything is written, naming both fingerprints;
- **checked**: a final refresh and count; a mismatch with the passages streamed raises
  :class:`DocumentCountMismatchError` (or is only reported with ``verify_count=False``), and the checkpoint
  never records such a load as complete: the next run starts it over;
- **nothing dropped silently**: documents Elasticsearch rejects are counted, the first ones kept as
  examples, every one appended to a ``.failures.jsonl`` file beside the checkpoint; after
  ``max_failures`` the load stops;
- **retries**: a node that cannot be reached is retried with exponential backoff (with several hosts the next
  attempt goes to a live node), then :class:`ElasticsearchUnreachableError` names the URL; documents answered
  429/502/503/504 are resent alone, with backoff; the report counts both kinds of retry.

Usage:
    >>> settings = StreamingWriterSettings(checkpoint_path="kilt.ckpt.json")
    >>> writer = ElasticsearchStreamingWriter("http://127.0.0.1:9200", "icr2-kilt", settings)
    >>> report = writer.write(KiltKnowledgeSource("kilt_knowledgesource.json").documents())
    >>> print(report.summary())
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from haystack import Document

from icr2_components.paths import output_file_problem
from icr2_components.records.integrity import DamagedFileError, check_seal, open_for_append, write_sealed_json
from icr2_components.retrying import RetryPolicy
from icr2_components.stores.config import IndexConfig
from icr2_components.stores.elasticsearch.connection import connection_options
from icr2_components.stores.elasticsearch.index_layout import IndexLayout
from icr2_components.stores.elasticsearch.store import (
    DOCUMENT_FIELDS,
    ElasticsearchUnreachableError,
    EmbeddingDimensionError,
    Similarity,
    build_elasticsearch_client,
    call_with_retries,
    describe_hosts,
    ensure_index,
    index_embedding_dim,
    wait_until_reachable,
)
from icr2_components.stores.errors import DocumentCountMismatchError, IndexConfigMismatchError

__all__ = [
    "BulkWriteError",
    "CheckpointMismatchError",
    "ElasticsearchStreamingWriter",
    "ElasticsearchUnreachableError",
    "EmbeddingDimensionError",
    "StreamingWriterSettings",
    "WriteReport",
    "document_to_source",
]

logger = logging.getLogger(__name__)

# 2: the checkpoint carries its content hash (records/integrity.py), checked with its counts on load
CHECKPOINT_VERSION = 2
# Kept in the index mapping's _meta while a load runs: the settings to restore.
LOAD_META_KEY = "icr2_bulk_load"
# Kept in the index mapping's _meta from the first load on: the fingerprint of the stream (corpus, chunking,
# embedding) the index holds, so that another corpus or config is refused before it is written in.
SOURCE_META_KEY = "icr2_source"
LOAD_SETTINGS = {"index.refresh_interval": "-1", "index.number_of_replicas": 0}
# Answers worth retrying, per document and per request (the writer's own bulk requests resend them: _send).
RETRY_STATUSES = (429, 502, 503, 504)
# the answer, filtered: only "errors" when all went well, the status (and error) of each item otherwise
BULK_FILTER_PATH = "errors,items.*.status,items.*.error"


class CheckpointMismatchError(RuntimeError):
    """The checkpoint belongs to another configuration, index or stream; the run refuses to resume."""


class BulkWriteError(RuntimeError):
    """Too many documents were rejected, or a chunk kept failing with a transient status after retries."""

    def __init__(self, message: str, report: WriteReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass
class WriteReport:
    """What a :meth:`ElasticsearchStreamingWriter.write` run did."""

    index: str
    url: str
    passages_streamed: int = 0  # documents in the stream, the resumed prefix included
    resumed_from: int = 0  # prefix skipped because a checkpoint confirmed it
    written: int = 0  # confirmed by Elasticsearch in this run
    bulk_requests: int = 0  # bulk requests sent in this run, resends included
    retried_requests: int = 0  # requests resent after a connection failure (node down, connection cut)
    retried_documents: int = 0  # documents resent after a 429/502/503/504 answer
    failed: int = 0  # rejected documents, this run and the runs it resumes
    failure_examples: list[dict] = field(default_factory=list)
    failures_path: str | None = None
    expected_count: int | None = None
    index_count: int | None = None
    count_ok: bool | None = None
    embedding_dim: int | None = None
    index_created: bool = False
    checkpoint_path: str | None = None
    seconds: float = 0.0
    stream_seconds: float = 0.0  # of which streaming the documents (the rest: index checks, settings, count check)
    force_merge_seconds: float | None = None  # the force-merge after the load (force_merge_segments), when asked for

    @property
    def passages_per_second(self) -> float:
        return self.written / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passages_per_second"] = round(self.passages_per_second, 1)
        return data

    def summary(self) -> str:
        lines = [
            f"index '{self.index}' at {self.url}: {self.passages_streamed} passages streamed"
            + (f" (first {self.resumed_from} skipped: confirmed by the checkpoint)" if self.resumed_from else ""),
            f"  written this run: {self.written} in {self.seconds:.1f}s ({self.passages_per_second:.0f} passages/s)",
            f"  bulk requests: {self.bulk_requests}; resent after a connection failure: {self.retried_requests}; "
            f"documents resent after a 429/5xx answer: {self.retried_documents}",
            f"  rejected by Elasticsearch: {self.failed}"
            + (f" (all listed in {self.failures_path})" if self.failed and self.failures_path else ""),
        ]
        if self.index_count is not None:
            verdict = "ok" if self.count_ok else "MISMATCH"
            lines.append(f"  count check: index holds {self.index_count}, expected {self.expected_count} -> {verdict}")
        if self.force_merge_seconds is not None:
            lines.append(f"  force-merged in {self.force_merge_seconds:.1f}s")
        return "\n".join(lines)


def document_to_source(document: Document) -> dict[str, Any]:
    """The ``_source`` ElasticsearchDocumentStore writes for ``document``: ``Document.to_dict()`` (meta flattened)
    without the ``None`` fields Elasticsearch rejects for typed fields (embedding, blob, score).

    Plain text documents (no blob, no sparse embedding, no meta key named like a Document field) take a
    shortcut that builds the same dict without ``to_dict``'s deep copy (a 384-float embedding makes that copy
    the most expensive step of a load); everything else goes through ``to_dict`` itself.
    """
    meta = document.meta
    if document.blob is None and document.sparse_embedding is None and not any(key in meta for key in DOCUMENT_FIELDS):
        source = {**meta, "id": document.id, "content": document.content}
        if document.embedding is not None:
            source["embedding"] = document.embedding
        return source
    source = document.to_dict()
    for key in ("embedding", "blob", "score"):
        if source.get(key) is None:
            source.pop(key, None)
    if source.pop("sparse_embedding", None) is not None:
        logger.warning(
            "Document %s has a sparse_embedding; the Elasticsearch index has no sparse_vector field, so it is not "
            "stored.",
            document.id,
        )
    return source


@dataclass
class _Chunk:
    ids: list[str]
    lines: list[bytes]  # per document: its action line and its source line, NDJSON, serialised once
    first_position: int  # stream position of the first document (0-based)

    @property
    def last_id(self) -> str:
        return self.ids[-1]

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class _ChunkResult:
    ok: int
    failures: list[dict]
    requests: int = 1  # bulk requests sent for the chunk, retries included


def _positive_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 1


def _positive_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class StreamingWriterSettings:
    """How :class:`ElasticsearchStreamingWriter` loads an index: bulk sizes, checkpoints, retries, the settings of
    a newly created index, and the checks at the end. Checked on construction (one line naming the field).

    Usage:
        >>> settings = StreamingWriterSettings(batch_size=200, checkpoint_path="kilt.ckpt.json", progress=False)
        >>> writer = ElasticsearchStreamingWriter("http://127.0.0.1:9200", "icr2-kilt", settings)

    :param batch_size: documents per bulk request.
    :param thread_count: bulk requests in flight at once (1: strictly sequential).
    :param max_chunk_bytes: a bulk request is split when its body would exceed this.
    :param checkpoint_path: JSON checkpoint file; None disables checkpointing (and resuming).
    :param checkpoint_every: write the checkpoint every this many confirmed chunks.
    :param checkpoint_seconds: and whenever this many seconds passed since the last one (a load that embeds
        slowly checkpoints by time long before it has confirmed ``checkpoint_every`` chunks).
    :param fingerprint: what identifies the stream (a string, or a JSON-able mapping hashed into one); a
        checkpoint is only resumed by a run with the same fingerprint and index.
    :param resume: False ignores (and replaces) an existing checkpoint.
    :param request_timeout: per request, seconds.
    :param max_retries: retries when the node cannot be reached, and resends of documents answered
        429/502/503/504, each with exponential backoff from ``retry_backoff`` seconds, capped at ``max_backoff``
        (one :class:`~icr2_components.retrying.RetryPolicy`).
    :param bm25_k1, bm25_b: BM25 parameters of a newly created index.
    :param analyzer: BM25's analyzer of a newly created index, ``english`` or ``standard`` (stores/text_analysis.py).
    :param embedding_similarity: similarity of the dense_vector field of a newly created index.
    :param number_of_shards: shards of a newly created index.
    :param layout: shards, replicas and vector index of a newly created index
        (:class:`~icr2_components.stores.elasticsearch.index_layout.IndexLayout`; overrides ``number_of_shards``).
    :param verify_count: raise :class:`DocumentCountMismatchError` when the final count differs.
    :param max_failures: stop with :class:`BulkWriteError` once more documents than this were rejected
        (None: never stop).
    :param progress: show a tqdm progress bar.
    :param load_replicas: replicas while the load runs (0, the default: fastest, restored afterwards); None keeps
        the index's own replicas, so that a cluster which must survive losing a node during the load keeps a
        copy of every shard on another node (see tests/test_elasticsearch_cluster.py).
    :param force_merge_segments: after a load whose count check passed, force-merge the index down to this many
        segments per shard (waited for, timed in the report); None (default) leaves merging to the node. A load
        leaves dozens of segments, and searching them all is what made kNN p99 1.2 s at 1M passages
        (bench/scale.py: 22 ms once merged to one); worth it for an index that is loaded once and then read.
    :param client_options: more keyword arguments for the client it builds (TLS CA, auth headers: see
        :func:`~icr2_components.stores.elasticsearch.connection.connection_options`).
    """

    batch_size: int = 500
    thread_count: int = 2
    max_chunk_bytes: int = 50 * 1024 * 1024
    checkpoint_path: str | os.PathLike | None = None
    checkpoint_every: int = 10
    checkpoint_seconds: float = 5.0
    fingerprint: str | Mapping[str, Any] | None = None
    resume: bool = True
    request_timeout: float = 60.0
    max_retries: int = 3
    retry_backoff: float = 1.0
    max_backoff: float = 30.0
    bm25_k1: float = 0.9
    bm25_b: float = 0.4
    analyzer: str = "english"
    embedding_similarity: Similarity = "cosine"
    number_of_shards: int = 1
    layout: IndexLayout | None = None
    verify_count: bool = True
    max_failures: int | None = 1000
    max_failure_examples: int = 20
    progress: bool = True
    load_replicas: int | None = 0
    force_merge_segments: int | None = None
    client_options: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("batch_size", "thread_count", "checkpoint_every", "max_chunk_bytes", "number_of_shards"):
            if not _positive_int(getattr(self, name)):
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}.")
        for name in ("checkpoint_seconds", "request_timeout"):
            if not _positive_number(getattr(self, name)):
                raise ValueError(f"{name} must be a positive number of seconds, got {getattr(self, name)!r}.")
        for name in ("retry_backoff", "max_backoff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}.")
        for name in ("max_retries", "max_failure_examples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}.")
        if self.max_failures is not None and (
            isinstance(self.max_failures, bool) or not isinstance(self.max_failures, int) or self.max_failures < 0
        ):
            raise ValueError(
                f"max_failures must be a non-negative integer or None (never stop), got {self.max_failures!r}."
            )
        if self.load_replicas is not None and (
            isinstance(self.load_replicas, bool) or not isinstance(self.load_replicas, int) or self.load_replicas < 0
        ):
            raise ValueError(
                "load_replicas must be a non-negative integer or None (keep the index's replicas), got "
                f"{self.load_replicas!r}."
            )
        if self.force_merge_segments is not None and not _positive_int(self.force_merge_segments):
            raise ValueError(
                "force_merge_segments must be a positive integer or None (no merge), got "
                f"{self.force_merge_segments!r}."
            )


class ElasticsearchStreamingWriter:
    """Stream haystack Documents into an Elasticsearch index that ElasticsearchDocumentStore can read.

    :param hosts: URL(s) of the cluster (a comma-separated string or a list).
    :param index: index name; created with :func:`~icr2_components.stores.elasticsearch.store.index_mapping`
        when missing.
    :param settings: how to load (:class:`StreamingWriterSettings`; its defaults when None).
    :param client: an existing ``elasticsearch.Elasticsearch`` client (otherwise one is built).
    :raises TypeError: when ``settings`` is not a :class:`StreamingWriterSettings`.
    """

    def __init__(
        self,
        hosts: str | list[str] = "http://127.0.0.1:9200",
        index: str = "icr2-kilt",
        settings: StreamingWriterSettings | None = None,
        *,
        client=None,
    ) -> None:
        if settings is None:
            settings = StreamingWriterSettings()
        if not isinstance(settings, StreamingWriterSettings):
            raise TypeError(f"settings must be a StreamingWriterSettings, got {type(settings).__name__}.")
        self.settings = settings
        self.hosts = hosts
        self.url = describe_hosts(hosts)
        self.index = index
        self.checkpoint_path = Path(settings.checkpoint_path).expanduser() if settings.checkpoint_path else None
        self.fingerprint = self._fingerprint(index, settings.fingerprint)
        self._client = client
        self._policy = RetryPolicy(
            max_retries=settings.max_retries, initial_backoff=settings.retry_backoff, max_backoff=settings.max_backoff
        )
        self._retry_lock = threading.Lock()
        self._retried_requests = 0
        self._retried_documents = 0

    # -- construction ---------------------------------------------------------------------------------------

    @classmethod
    def from_config(
        cls, config: IndexConfig, *, fingerprint: str | Mapping[str, Any] | None = None, **overrides: Any
    ) -> ElasticsearchStreamingWriter:
        """A writer for ``config.store`` with ``config.writer``'s batch size, threads and checkpoint.

        ``overrides`` are :class:`StreamingWriterSettings` fields (and ``client``) that replace the config's.

        With ``writer.checkpoint_path: null`` the checkpoint is ``<cache>/checkpoints/<index>.json``. Without
        ``fingerprint`` the corpus and embedding sections of the config are the fingerprint.
        """
        from icr2_components.paths import cache_dir

        store, writer = config.store, config.writer
        checkpoint = writer.checkpoint_path or str(cache_dir() / "checkpoints" / f"{store.index}.json")
        if fingerprint is None:
            fingerprint = {
                "corpus": asdict(config.corpus),
                "embedding": asdict(config.embedding) if config.embedding.enabled else None,
            }
        options: dict[str, Any] = dict(
            batch_size=writer.batch_size,
            thread_count=writer.thread_count,
            max_chunk_bytes=writer.max_chunk_bytes,
            checkpoint_path=checkpoint,
            checkpoint_every=writer.checkpoint_every,
            checkpoint_seconds=writer.checkpoint_seconds,
            fingerprint=fingerprint,
            request_timeout=store.request_timeout,
            max_retries=store.max_retries,
            bm25_k1=store.bm25_k1,
            bm25_b=store.bm25_b,
            client_options=connection_options(store),
            layout=IndexLayout.from_config(config),
            analyzer=store.analyzer,
            load_replicas=writer.load_replicas,
            force_merge_segments=writer.force_merge_segments,
        )
        options.update(overrides)
        client = options.pop("client", None)
        return cls(store.hosts, store.index, StreamingWriterSettings(**options), client=client)

    @staticmethod
    def _fingerprint(index: str, fingerprint: str | Mapping[str, Any] | None) -> str:
        payload = json.dumps({"index": index, "stream": fingerprint}, sort_keys=True, default=str)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:20]

    @property
    def client(self):
        if self._client is None:
            # transport-level retries off: connection failures are retried here, with backoff
            self._client = build_elasticsearch_client(
                self.hosts,
                request_timeout=self.settings.request_timeout,
                max_retries=0,
                **dict(self.settings.client_options or {}),
            )
        return self._client

    def _count_retry(self, *, requests: int = 0, documents: int = 0) -> None:
        with self._retry_lock:
            self._retried_requests += requests
            self._retried_documents += documents

    def _retrying(self, call, what: str):
        def log_retry(attempt: int, error: BaseException, delay: float) -> None:
            self._count_retry(requests=1)
            logger.warning(
                "%s: Elasticsearch at %s unreachable (%s); retry %d/%d in %.1fs",
                what,
                self.url,
                type(error).__name__,
                attempt,
                self.settings.max_retries,
                delay,
            )

        return call_with_retries(call, url=self.url, policy=self._policy, on_retry=log_retry)

    # -- checkpoint -----------------------------------------------------------------------------------------

    def read_checkpoint(self) -> dict | None:
        """The checkpoint, checked whole: its content hash and its counts (``written + failed == position``, a
        ``last_id`` once anything is confirmed). A checkpoint that is not whole is a
        :class:`CheckpointMismatchError` naming the file and what disagrees."""
        if self.checkpoint_path is None or not self.checkpoint_path.exists():
            return None
        try:
            data = json.loads(self.checkpoint_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CheckpointMismatchError(
                f"The checkpoint {self.checkpoint_path} cannot be read ({error}); delete it to start the load over."
            ) from error
        if not isinstance(data, dict):
            raise CheckpointMismatchError(
                f"The checkpoint {self.checkpoint_path} is not a JSON object; delete it to start the load over."
            )
        if data.get("version") == CHECKPOINT_VERSION:
            try:
                check_seal(data, self.checkpoint_path, "checkpoint")
            except DamagedFileError as error:
                raise CheckpointMismatchError(f"{error} Delete it to start the load over.") from None
            counts = {key: data.get(key) for key in ("position", "written", "failed")}
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()) or (
                counts["written"] + counts["failed"] != counts["position"]
            ):
                raise CheckpointMismatchError(
                    f"The checkpoint {self.checkpoint_path} disagrees with itself: position {counts['position']} "
                    f"should be written {counts['written']} + failed {counts['failed']}; delete it to start the load "
                    "over."
                )
            if counts["position"] and not data.get("last_id"):
                raise CheckpointMismatchError(
                    f"The checkpoint {self.checkpoint_path} confirms {counts['position']} passages but records no "
                    "last_id; delete it to start the load over."
                )
        return data

    def _write_checkpoint(self, state: dict) -> None:
        """Atomically (temporary file, fsync, rename), with its content hash: a kill at any moment leaves the
        previous checkpoint or this one, whole."""
        if self.checkpoint_path is None:
            return
        state = dict(state, updated_at=datetime.now(UTC).isoformat(timespec="seconds"))
        self.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
        write_sealed_json(self.checkpoint_path, state)

    def _failures_path(self) -> Path | None:
        if self.checkpoint_path is None:
            return None
        return self.checkpoint_path.with_name(self.checkpoint_path.name + ".failures.jsonl")

    def _resume_state(self) -> dict | None:
        """The checkpoint to resume from, None to start over; raises when it belongs to another load."""
        checkpoint = self.read_checkpoint()
        if checkpoint is None:
            return None
        if not self.settings.resume:
            logger.info("resume=False: ignoring the checkpoint %s", self.checkpoint_path)
            return None
        if checkpoint.get("count_check_failed"):
            logger.warning(
                "The checkpoint %s records a load whose count check failed (%s); this run loads from the start and "
                "overwrites by id.",
                self.checkpoint_path,
                checkpoint["count_check_failed"],
            )
            return None
        if checkpoint.get("completed"):
            logger.info(
                "The checkpoint %s records a completed load (%s passages); this run loads from the start and "
                "overwrites by id.",
                self.checkpoint_path,
                checkpoint.get("position"),
            )
            return None
        if checkpoint.get("version") != CHECKPOINT_VERSION:
            raise CheckpointMismatchError(
                f"The checkpoint {self.checkpoint_path} has format version {checkpoint.get('version')!r}, this writer "
                f"reads {CHECKPOINT_VERSION}; "
                "delete it (or pass resume=False) to start the load over."
            )
        if checkpoint.get("index") != self.index or checkpoint.get("fingerprint") != self.fingerprint:
            raise CheckpointMismatchError(
                f"Refusing to resume from {self.checkpoint_path}: it records an interrupted load into index "
                f"'{checkpoint.get('index')}' "
                f"with config fingerprint {checkpoint.get('fingerprint')}, but this run writes index '{self.index}' "
                "with fingerprint "
                f"{self.fingerprint} (the corpus, chunking or embedding settings changed, so the stream's prefix is "
                "not the one "
                "already written). Delete the checkpoint file, or pass resume=False, to start the load over."
            )
        return checkpoint

    # -- index settings -------------------------------------------------------------------------------------

    def _load_settings(self) -> dict[str, Any]:
        settings = dict(LOAD_SETTINGS)
        if self.settings.load_replicas is None:
            settings.pop("index.number_of_replicas")
        else:
            settings["index.number_of_replicas"] = self.settings.load_replicas
        return settings

    def _current_load_settings(self) -> dict[str, Any]:
        body = self.client.indices.get_settings(index=self.index, flat_settings=True).body
        settings = next(iter(body.values()))["settings"]
        return {key: settings.get(key) for key in LOAD_SETTINGS}

    def _saved_settings(self) -> dict[str, Any] | None:
        body = self.client.indices.get_mapping(index=self.index).body
        meta = next(iter(body.values()))["mappings"].get("_meta") or {}
        saved = meta.get(LOAD_META_KEY)
        return dict(saved["settings"]) if isinstance(saved, dict) and "settings" in saved else None

    def _put_load_meta(self, saved: dict[str, Any] | None) -> None:
        body = self.client.indices.get_mapping(index=self.index).body
        meta = dict(next(iter(body.values()))["mappings"].get("_meta") or {})
        if saved is None:
            meta.pop(LOAD_META_KEY, None)
        else:
            meta[LOAD_META_KEY] = {
                "settings": saved,
                "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            }
        self.client.indices.put_mapping(index=self.index, meta=meta)

    def _index_meta(self) -> dict[str, Any]:
        body = self.client.indices.get_mapping(index=self.index).body
        return dict(next(iter(body.values()))["mappings"].get("_meta") or {})

    def _refuse_another_source(self) -> str | None:
        """The stream fingerprint recorded in the index (None: no index yet, or one loaded before fingerprints
        were recorded); raises :class:`IndexConfigMismatchError` naming both when it is another stream's, before
        anything is written: the load would leave the index holding two corpora (and fail its count check)."""
        if not self.client.indices.exists(index=self.index):
            return None
        recorded = (self._index_meta().get(SOURCE_META_KEY) or {}).get("fingerprint")
        if recorded is None or recorded == self.fingerprint:
            return recorded
        raise IndexConfigMismatchError(
            f"Index '{self.index}' at {self.url} holds the passages of another corpus or config (stream fingerprint "
            f"{recorded}, recorded at its first load); this config's is {self.fingerprint} (corpus, chunking or "
            "embedding differ). Nothing was written: writing would leave the index holding two corpora. Write into "
            f"a new index (store.index), or delete this one first (DELETE {self.url}/{self.index})."
        )

    def _record_source(self) -> None:
        meta = self._index_meta()
        meta[SOURCE_META_KEY] = {"fingerprint": self.fingerprint,
                                 "recorded_at": datetime.now(UTC).isoformat(timespec="seconds")}
        self.client.indices.put_mapping(index=self.index, meta=meta)

    def _enter_load_settings(self) -> dict[str, Any]:
        """Switch to load settings; return the settings to restore afterwards. Settings already at their load
        value are not put again (each put is a cluster-state update, tens of milliseconds)."""
        current = self._current_load_settings()
        saved = self._saved_settings()
        if saved is not None:
            logger.warning(
                "Index '%s' still has the load settings of an interrupted run; the settings it had before (%s) will be "
                "restored.",
                self.index,
                saved,
            )
        else:
            saved = dict(current)
            if str(saved.get("index.refresh_interval")) == "-1":
                # left behind by a load that was killed before this writer recorded anything: use the default
                saved["index.refresh_interval"] = None
            self._put_load_meta(saved)
        changes = {key: value for key, value in self._load_settings().items() if str(current.get(key)) != str(value)}
        if changes:
            self.client.indices.put_settings(index=self.index, settings=changes)
        return saved

    def _restore_settings(self, saved: dict[str, Any]) -> None:
        load = self._load_settings()
        changes = {key: value for key, value in saved.items() if key not in load or str(load[key]) != str(value)}

        def restore() -> None:
            if changes:
                self.client.indices.put_settings(index=self.index, settings=changes)
            self._put_load_meta(None)

        self._retrying(restore, "restoring index settings")

    # -- the load -------------------------------------------------------------------------------------------

    def write(
        self,
        documents: Iterable[Document],
        *,
        total: int | None = None,
        progress: bool | None = None,
        prepare: Callable[[Iterable[Document]], Iterable[Document]] | None = None,
    ) -> WriteReport:
        """Stream ``documents`` into the index; see the module docstring for the guarantees.

        :param documents: any iterable of Documents, consumed once, in order; to resume, a re-run must yield
            the same documents in the same order (KiltKnowledgeSource does).
        :param total: the stream's length when known, for the progress bar.
        :param prepare: a costly step applied to the documents after the resumed prefix is skipped (e.g.
            ``PassageEmbedder.embed_stream``): a resume after N passages then reads N passages instead of
            embedding them. It must keep the documents' order and ids.
        """
        from tqdm.auto import tqdm

        show_progress = self.settings.progress if progress is None else progress
        started = time.perf_counter()
        with self._retry_lock:
            self._retried_requests = self._retried_documents = 0
        report = WriteReport(
            index=self.index, url=self.url, checkpoint_path=str(self.checkpoint_path) if self.checkpoint_path else None
        )
        failures_path = self._failures_path()
        report.failures_path = str(failures_path) if failures_path else None
        self._check_checkpoint_writable()

        wait_until_reachable(self.client, self.url, policy=self._policy)

        checkpoint, recorded_source = self._checkpoint_to_resume(report)
        position = int(checkpoint["position"]) if checkpoint else 0
        stream = iter(documents)
        if checkpoint and position:
            self._skip_prefix(stream, position, checkpoint.get("last_id"), show_progress)
            report.resumed_from = position
        elif failures_path is not None and failures_path.exists():
            failures_path.unlink()

        if prepare is not None:
            # a costly stream (embedding) runs in its own thread, so that what it has yielded is sent and
            # confirmed every few seconds even while it works on its next batch
            stream = _prefetched(prepare(stream), self.settings.checkpoint_seconds)
        first = next(_documents_only(stream), None)
        embedding_dim = self._ensure_index_for(first, report, recorded_source)
        state = self._load_state(checkpoint, position, report)
        saved_settings = self._retrying(self._enter_load_settings, "switching to load settings")
        bar = tqdm(
            total=total,
            initial=position,
            unit=" passages",
            desc=f"indexing into {self.index}",
            disable=not show_progress,
            smoothing=0.05,
        )
        self._stream_all(_prepend(first, stream), position, embedding_dim, state, report, bar, failures_path,
                         saved_settings)
        self._confirm_count(state, report, started)
        if report.count_ok and self.settings.force_merge_segments is not None:
            self._force_merge(report)
        self._report_problems(report, failures_path)
        return report

    def _check_checkpoint_writable(self) -> None:
        """Refuse a checkpoint path that cannot be written, before the node is touched or anything is embedded."""
        if self.checkpoint_path is not None:
            problem = output_file_problem(self.checkpoint_path)
            if problem:
                raise ValueError(f"The checkpoint cannot be written: {problem}. Nothing was loaded; set "
                                 "writer.checkpoint_path to a file path.")

    def _checkpoint_to_resume(self, report: WriteReport) -> tuple[dict | None, str | None]:
        """The checkpoint to resume from (None: start over) and the source the index recorded (another one is
        refused); the report starts from the checkpoint's rejected documents."""
        checkpoint = self._resume_state()
        recorded_source = self._retrying(self._refuse_another_source, "reading the index's source")
        if checkpoint is not None and not self._checkpoint_matches_index(checkpoint):
            checkpoint = None
        report.failed = int(checkpoint.get("failed", 0)) if checkpoint else 0
        if checkpoint:
            report.failure_examples = list(checkpoint.get("failure_examples", []))[: self.settings.max_failure_examples]
        return checkpoint, recorded_source

    def _ensure_index_for(self, first: Document | None, report: WriteReport, recorded_source: str | None) -> int | None:
        """Create the index if needed (vectors as wide as the first document's, else as the index has them) and
        record the source on a new one.

        :returns: the embedding dimension (None: the index holds no vectors).
        """
        embedding_dim = len(first.embedding) if first is not None and first.embedding is not None else None
        report.index_created = self._retrying(
            lambda: ensure_index(
                self.client,
                self.index,
                embedding_dim=embedding_dim,
                similarity=self.settings.embedding_similarity,
                bm25_k1=self.settings.bm25_k1,
                bm25_b=self.settings.bm25_b,
                analyzer=self.settings.analyzer,
                number_of_shards=self.settings.number_of_shards,
                layout=self.settings.layout,
            ),
            "creating the index",
        )
        if embedding_dim is None:
            embedding_dim = index_embedding_dim(self.client, self.index)[1]
        report.embedding_dim = embedding_dim
        if recorded_source is None:
            self._retrying(self._record_source, "recording the index's source")
        return embedding_dim

    def _load_state(self, checkpoint: dict | None, position: int, report: WriteReport) -> dict:
        """The checkpoint's state this load starts from (what the resumed checkpoint confirmed, or nothing)."""
        return {
            "version": CHECKPOINT_VERSION,
            "index": self.index,
            "url": self.url,
            "fingerprint": self.fingerprint,
            "position": position,
            "written": int(checkpoint.get("written", 0)) if checkpoint else 0,
            "failed": report.failed,
            "last_id": checkpoint.get("last_id") if checkpoint else None,
            "failure_examples": report.failure_examples,
            "completed": False,
        }

    def _stream_all(
        self,
        documents: Iterator[Document],
        position: int,
        embedding_dim: int | None,
        state: dict,
        report: WriteReport,
        bar,
        failures_path: Path | None,
        saved_settings: dict[str, Any],
    ) -> None:
        """Send ``documents`` in chunks, checkpointing as they are confirmed; however it ends, the checkpoint is
        written and the index's own settings are restored."""
        # its folder made first (a fresh cache has no checkpoints/ folder); a line cut by a kill is ended first
        failures_file = open_for_append(failures_path) if failures_path is not None else None
        try:
            chunks = self._chunks(documents, position, embedding_dim)
            stream_started = time.perf_counter()
            self._stream(chunks, state, report, bar, failures_file)
            report.stream_seconds = time.perf_counter() - stream_started
        except BaseException:
            self._write_checkpoint(state)
            raise
        finally:
            with self._retry_lock:
                report.retried_requests, report.retried_documents = self._retried_requests, self._retried_documents
            bar.close()
            if failures_file is not None:
                failures_file.close()
            try:
                self._restore_settings(saved_settings)
            except Exception:  # the original error matters more; this one is logged
                logger.exception(
                    "Could not restore the settings of index '%s' (%s); set them by hand.", self.index, saved_settings
                )

    def _confirm_count(self, state: dict, report: WriteReport, started: float) -> None:
        """Count the index against what was streamed less what was rejected; the checkpoint records the load as
        complete only when the count holds (else the next run starts over instead of trusting it)."""
        report.passages_streamed = state["position"]
        report.failed = state["failed"]
        report.failure_examples = state["failure_examples"]
        self._retrying(lambda: self.client.indices.refresh(index=self.index), "refreshing the index")
        report.index_count = int(
            self._retrying(lambda: self.client.count(index=self.index)["count"], "counting documents")
        )
        report.expected_count = state["position"] - state["failed"]
        report.count_ok = report.index_count == report.expected_count
        report.seconds = time.perf_counter() - started
        state["index_count"] = report.index_count
        if report.count_ok:
            state["completed"] = True
        else:
            state["count_check_failed"] = {"index_count": report.index_count, "expected_count": report.expected_count}
        self._write_checkpoint(state)

    def _force_merge(self, report: WriteReport) -> None:
        """Merge the index's segments after a load whose count held (timed apart from the load)."""
        merge_started = time.perf_counter()
        # a merge of a large index takes minutes to hours: wait for it without the client's request timeout
        self._retrying(
            lambda: self.client.options(request_timeout=None).indices.forcemerge(
                index=self.index, max_num_segments=self.settings.force_merge_segments, wait_for_completion=True
            ),
            "force-merging the index",
        )
        # kept apart from report.seconds, so that the load's passages/s stays the load's
        report.force_merge_seconds = time.perf_counter() - merge_started

    def _report_problems(self, report: WriteReport, failures_path: Path | None) -> None:
        """Log the rejected documents; a failed count check is an error (raised with ``verify_count``, else logged).

        :raises DocumentCountMismatchError: the count check failed and ``verify_count`` is on.
        """
        if report.failed:
            logger.warning(
                "%d document(s) were rejected by Elasticsearch (examples: %s)%s",
                report.failed,
                report.failure_examples[:3],
                f"; all are listed in {failures_path}" if failures_path else "",
            )
        if not report.count_ok:
            message = (
                f"Count check failed for index '{self.index}' at {self.url}: it holds {report.index_count} documents, "
                "but "
                f"{report.passages_streamed} passages were streamed and {report.failed} rejected, so "
                f"{report.expected_count} were expected. "
                + (
                    "More documents than streamed: the index holds documents from another load (write into a new "
                    "index)."
                    if report.index_count > report.expected_count
                    else "Fewer documents than streamed: the stream repeats ids, or documents were deleted meanwhile."
                )
            )
            if self.settings.verify_count:
                raise DocumentCountMismatchError(message, report)
            logger.error(message)

    def _checkpoint_matches_index(self, checkpoint: dict) -> bool:
        """A checkpoint is only trusted when the index still holds at least what it confirms."""
        if not self.client.indices.exists(index=self.index):
            logger.warning(
                "The checkpoint %s confirms %s passages, but index '%s' does not exist; loading from the start.",
                self.checkpoint_path,
                checkpoint.get("written"),
                self.index,
            )
            return False
        self.client.indices.refresh(index=self.index)
        count = int(self.client.count(index=self.index)["count"])
        if count < int(checkpoint.get("written", 0)):
            logger.warning(
                "The checkpoint %s confirms %s passages, but index '%s' holds %d; loading from the start.",
                self.checkpoint_path,
                checkpoint.get("written"),
                self.index,
                count,
            )
            return False
        return True

    def _skip_prefix(self, stream: Iterator[Document], position: int, last_id: str | None, show_progress: bool) -> None:
        from tqdm.auto import tqdm

        logger.info(
            "Resuming the load into '%s' after %d passages confirmed by %s", self.index, position, self.checkpoint_path
        )
        # (not `for ... in tqdm(stream)`: leaving that loop early closes the underlying generator)
        document = None
        skipped = 0
        with tqdm(
            total=position,
            unit=" passages",
            desc="skipping the confirmed prefix",
            disable=not show_progress,
            leave=False,
        ) as bar:
            for document in stream:  # noqa: B007 - the last one read is checked against last_id below
                skipped += 1
                if skipped % 10_000 == 0:
                    bar.update(10_000)
                if skipped >= position:
                    break
            bar.update(skipped % 10_000)
        if skipped < position:
            raise CheckpointMismatchError(
                f"The checkpoint {self.checkpoint_path} confirms {position} passages, but the stream ended after "
                f"{skipped}: it is not the "
                "stream that was being loaded. Delete the checkpoint file, or pass resume=False, to start over."
            )
        if last_id is not None and document.id != last_id:
            raise CheckpointMismatchError(
                f"The checkpoint {self.checkpoint_path} says passage {position} of the stream is {last_id!r}, but this "
                "stream has "
                f"{document.id!r} there: the corpus or its order changed. Delete the checkpoint file, or pass "
                "resume=False, to start over."
            )

    def _chunks(self, stream: Iterator[Document], position: int, embedding_dim: int | None) -> Iterator[_Chunk]:
        """Chunks of ``batch_size`` documents (fewer when the body would pass ``max_chunk_bytes``, or when the
        chunk's first document came ``checkpoint_seconds`` ago: a slow stream, such as one embedded on the way, is
        sent and confirmed every few seconds instead of once per ``batch_size``), each document serialised once,
        here, into its two NDJSON lines: the sender only joins and posts them."""
        dumps = _source_serializer()
        ids: list[str] = []
        lines: list[bytes] = []
        size = 0
        first_position = position
        chunk_started = time.monotonic()
        for document in stream:
            if ids and time.monotonic() - chunk_started >= self.settings.checkpoint_seconds:
                yield _Chunk(ids, lines, first_position)
                first_position += len(ids)
                ids, lines, size = [], [], 0
            if document is _STREAM_IDLE:  # a prefetched stream at work on its next documents
                continue
            if not ids:
                chunk_started = time.monotonic()
            if document.embedding is not None:
                if embedding_dim is None:
                    embedding_dim = len(document.embedding)
                elif len(document.embedding) != embedding_dim:
                    raise EmbeddingDimensionError(self.index, embedding_dim, len(document.embedding), document.id)
            line = b'{"index":{"_id":' + dumps(document.id) + b"}}\n" + dumps(document_to_source(document)) + b"\n"
            if ids and size + len(line) > self.settings.max_chunk_bytes:
                yield _Chunk(ids, lines, first_position)
                first_position += len(ids)
                ids, lines, size = [], [], 0
            ids.append(document.id)
            lines.append(line)
            size += len(line)
            if len(ids) >= self.settings.batch_size:
                yield _Chunk(ids, lines, first_position)
                first_position += len(ids)
                ids, lines, size = [], [], 0
        if ids:
            yield _Chunk(ids, lines, first_position)

    def _send(self, chunk: _Chunk) -> _ChunkResult:
        """One chunk as one bulk request of pre-serialised NDJSON (the same bytes the ceiling replays).

        Retries, all idempotent (op_type ``index`` with fixed ids): a connection failure resends the chunk after
        a backoff (with several hosts the client's pool moves on to a live node); a 429/502/503/504 answer to
        the whole request resends it; documents answered 429/502/503/504 are resent alone. Other rejections are
        per-document failures. After ``max_retries`` the still-transient documents are returned as failures with
        their status, which :meth:`_stream` turns into :class:`BulkWriteError`.
        """
        import elasticsearch

        pending = list(range(len(chunk)))  # positions still to send: all, then the transient ones
        ok, failures, requests = 0, [], 0
        first_status: list[int] = []  # the status of the first resent document, for the log line

        def send_pending() -> list[int]:
            """Sends the pending documents once; returns those answered 429/502/503/504."""
            nonlocal ok, requests
            body = b"".join(chunk.lines) if len(pending) == len(chunk) else b"".join(chunk.lines[i] for i in pending)
            requests += 1
            try:
                response = self._retrying(
                    lambda: self.client.bulk(operations=body, index=self.index, filter_path=BULK_FILTER_PATH),
                    f"bulk request at passage {chunk.first_position}",
                )
                statuses = self._item_statuses(response, len(pending))
            except elasticsearch.ApiError as error:
                if error.status_code not in RETRY_STATUSES:
                    raise
                statuses = [(error.status_code, {"type": "request_rejected", "reason": str(error)[:300]})] * len(
                    pending
                )
            transient = []
            for position, (status, error) in zip(pending, statuses, strict=True):
                if status < 300:
                    ok += 1
                elif status in RETRY_STATUSES:
                    transient.append((position, status, error))
                else:
                    failures.append(_failure_record(chunk.ids[position], status, error))
            pending[:] = [position for position, _, _ in transient]
            first_status[:] = [transient[0][1]] if transient else []
            return transient

        def log_resend(attempt: int, _error: BaseException | None, delay: float) -> None:
            self._count_retry(documents=len(pending))
            logger.warning(
                "bulk request at passage %d: %d document(s) answered %s; resending them (%d/%d) in %.1fs",
                chunk.first_position, len(pending), first_status[0], attempt, self.settings.max_retries, delay,
            )

        transient = self._policy.repeat_while(send_pending, again=bool, on_retry=log_resend)
        # still transient after the last retry: returned as failures with their status (BulkWriteError in _stream)
        failures.extend(_failure_record(chunk.ids[position], status, error) for position, status, error in transient)
        return _ChunkResult(ok, failures, requests)

    @staticmethod
    def _item_statuses(response, expected: int) -> list[tuple[int, Any]]:
        """``(status, error)`` per document of a bulk answer, in request order."""
        body = response.body
        if not body.get("errors"):
            return [(200, None)] * expected
        items = body.get("items") or []
        if len(items) != expected:
            raise RuntimeError(
                f"Elasticsearch answered a bulk request of {expected} documents with {len(items)} items."
            )
        statuses = []
        for item in items:
            info = next(iter(item.values()))
            statuses.append((int(info.get("status", 500)), info.get("error")))
        return statuses

    def _stream(self, chunks: Iterator[_Chunk], state: dict, report: WriteReport, bar, failures_file) -> None:
        """Send the chunks from ``thread_count`` threads and confirm their answers in stream order.

        Answers are confirmed, and the checkpoint written when due, by a watcher thread as soon as they arrive, not
        only when the stream yields its next chunk: a stream that is slow to yield (embedding on the way) would
        otherwise leave written chunks unrecorded for as long as it takes, and a kill would redo them."""
        in_flight: deque[tuple[Future, _Chunk]] = deque()
        max_in_flight = self.settings.thread_count * 2
        batches = 0
        last_checkpoint = time.monotonic()
        unrecorded = False  # confirmed chunks that no checkpoint records yet
        lock = threading.Lock()  # in_flight, state, report, bar and failures_file: the loop's and the watcher's
        finished = threading.Event()
        watcher_errors: list[BaseException] = []

        def record() -> None:
            nonlocal last_checkpoint, unrecorded
            if failures_file is not None:
                os.fsync(failures_file.fileno())
            self._write_checkpoint(state)
            last_checkpoint = time.monotonic()
            unrecorded = False

        def confirm(future: Future, chunk: _Chunk) -> None:
            nonlocal batches, unrecorded
            result: _ChunkResult = future.result()
            transient = [f for f in result.failures if f.get("status") in RETRY_STATUSES]
            if transient:
                raise BulkWriteError(
                    f"Elasticsearch at {self.url} kept answering {transient[0]['status']} for {len(transient)} "
                    "document(s) of the chunk "
                    f"starting at passage {chunk.first_position}, after {self.settings.max_retries} retries (e.g. "
                    f"{transient[0]}). "
                    "The checkpoint stops before this chunk; re-run to resume.",
                    report,
                )
            state["position"] = chunk.first_position + len(chunk)
            state["written"] += result.ok
            state["last_id"] = chunk.last_id
            report.written += result.ok
            report.bulk_requests += result.requests
            if result.failures:
                state["failed"] += len(result.failures)
                room = self.settings.max_failure_examples - len(state["failure_examples"])
                if room > 0:
                    state["failure_examples"].extend(result.failures[:room])
                if failures_file is not None:
                    for failure in result.failures:
                        failures_file.write(json.dumps(failure, default=str) + "\n")
                    failures_file.flush()
            bar.update(len(chunk))
            batches += 1
            unrecorded = True
            due_by_time = time.monotonic() - last_checkpoint >= self.settings.checkpoint_seconds
            if batches % self.settings.checkpoint_every == 0 or due_by_time:
                record()
            if self.settings.max_failures is not None and state["failed"] > self.settings.max_failures:
                report.failed = state["failed"]
                report.failure_examples = state["failure_examples"]
                raise BulkWriteError(
                    f"Stopping: {state['failed']} documents were rejected by Elasticsearch (more than "
                    f"max_failures={self.settings.max_failures}); "
                    f"examples: {state['failure_examples'][:3]}",
                    report,
                )

        def confirm_answered(room: int) -> None:
            """Confirm the answered chunks at the head of the queue, then wait (lock released) until fewer than
            ``room`` chunks are in flight; raises what the watcher met."""
            while True:
                with lock:
                    if watcher_errors:
                        raise watcher_errors[0]
                    while in_flight and in_flight[0][0].done():
                        confirm(*in_flight.popleft())
                    if len(in_flight) < room:
                        return
                    head = in_flight[0][0]
                wait([head])

        def watch() -> None:
            tick = min(1.0, self.settings.checkpoint_seconds)
            while not finished.wait(tick):
                with lock:
                    try:
                        while in_flight and in_flight[0][0].done():
                            confirm(*in_flight.popleft())
                        if unrecorded and time.monotonic() - last_checkpoint >= self.settings.checkpoint_seconds:
                            record()
                    except BaseException as error:  # handed to the loop, which raises it
                        watcher_errors.append(error)
                        return

        pool = ThreadPoolExecutor(max_workers=self.settings.thread_count, thread_name_prefix="es-bulk")
        watcher = threading.Thread(target=watch, name="es-bulk-confirm", daemon=True)
        watcher.start()
        try:
            for chunk in chunks:
                with lock:
                    in_flight.append((pool.submit(self._send, chunk), chunk))
                confirm_answered(max_in_flight)
            confirm_answered(1)
        finally:
            finished.set()
            watcher.join()
            # on an error: drop what has not started, let running requests end (they are bounded by the timeout);
            # their results are not confirmed, so a re-run sends them again (overwriting by id)
            for future, _ in in_flight:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)


def _failure_record(document_id: str, status: int, error: Any) -> dict:
    """A compact, JSON-able record of one rejected document."""
    record: dict[str, Any] = {"id": document_id, "status": status}
    if isinstance(error, dict):
        record["type"] = error.get("type")
        reason = error.get("reason") or ""
        caused = error.get("caused_by") or {}
        if caused.get("reason"):
            reason = f"{reason} (caused by: {caused.get('reason')})"
        record["reason"] = reason[:500]
    elif error is not None:
        record["reason"] = str(error)[:500]
    return record


def _source_serializer() -> Callable[[Any], bytes]:
    """orjson when installed (a 384-float embedding serialises more than 10x faster than with json), else json.

    Values orjson does not know (e.g. a Decimal in meta) go through the Elasticsearch client's own
    ``default``, as they would in the client."""
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is a dependency; this is for an environment without it
        from elasticsearch.serializer import JsonSerializer

        logger.warning(
            "orjson is not installed: the writer serialises with the json module, much slower with vectors (pip "
            "install orjson)."
        )
        default = JsonSerializer().default
        return lambda value: json.dumps(value, default=default, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8"
        )
    from elasticsearch.serializer import JsonSerializer

    default = JsonSerializer().default
    option = orjson.OPT_SERIALIZE_NUMPY
    return lambda value: orjson.dumps(value, default=default, option=option)


def _prepend(first: Document | None, rest: Iterator[Document]) -> Iterator[Document]:
    if first is not None:
        yield first
    yield from rest


# yielded by _prefetched when its stream produced nothing for a while (the chunker may send what it holds)
_STREAM_IDLE = object()
_STREAM_END = object()


def _documents_only(stream: Iterator[Any]) -> Iterator[Document]:
    return (item for item in stream if item is not _STREAM_IDLE)


def _prefetched(documents: Iterable[Document], idle_seconds: float, capacity: int = 1024) -> Iterator[Any]:
    """``documents``, produced by a thread of their own into a bounded queue; :data:`_STREAM_IDLE` is yielded
    whenever nothing arrived for ``idle_seconds``. The producer's error is raised here, in stream order; closing
    this generator stops the producer at its next document."""
    import queue

    items: queue.Queue = queue.Queue(maxsize=capacity)
    stop = threading.Event()

    def produce() -> None:
        try:
            for document in documents:
                while not stop.is_set():
                    try:
                        items.put((document, None), timeout=0.5)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put((_STREAM_END, None))
        except BaseException as error:  # raised by the consumer
            items.put((_STREAM_END, error))

    producer = threading.Thread(target=produce, name="es-bulk-stream", daemon=True)
    producer.start()
    try:
        while True:
            try:
                item, error = items.get(timeout=idle_seconds)
            except queue.Empty:
                yield _STREAM_IDLE
                continue
            if item is _STREAM_END:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
