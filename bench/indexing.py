"""Passages per second into Elasticsearch: the project's writer against the node's ceiling, parallel_bulk and
ElasticsearchDocumentStore.write_documents, all in the same run, on the same node, with the same passages.

    bash scripts/elasticsearch.sh start
    .venv/bin/python bench/indexing.py [--times 5] [--embedding-times 2] [--rounds 2] [--batch-size 500] [--threads 2]
    .venv/bin/python bench/indexing.py --passages 600 --times 2 --embedding-times 1 --rounds 1   # a quick check
    .venv/bin/python bench/indexing.py --resume-only [--resume-passages 2000]
        [--resume-out bench/results/indexing_resume.json]

Figures mean something only on idle cores: on 2 cores the node and the client compete for the same CPUs, and
any other job changes both. The ratios are taken against baselines measured in the same run.

The passages: the bundled sample (``--passages`` N: its first N) ``--times`` times over (each copy with its own
ids, ``<id>-x<k>``), no vectors; and ``--embedding-times`` times with all-MiniLM-L6-v2 vectors (384 floats,
computed once and cached). They are held in memory, so no method pays for reading the corpus, and every method
gets the very same Documents, the same bulk size (``--batch-size``) and, where it can, the same requests in
flight (``--threads``). Every method writes into a fresh index with the writer's mapping and settings (refresh
off, 0 replicas), except write_documents, which uses the library's own index; every timing ends with a refresh
and a count, which must equal the passages.

  ceiling:        the NDJSON bulk bodies, serialised before the clock starts, posted from ``--threads`` threads
                  (what the node can take from a client that spends nothing);
  parallel_bulk:  ``elasticsearch.helpers.parallel_bulk`` over the same sources, same chunk size and threads;
  writer:         ``ElasticsearchStreamingWriter.write`` (checkpoints on, every 10 chunks and fsynced; final
                  refresh and count check);
  write_documents(refresh=False): ``ElasticsearchDocumentStore.write_documents(batch, policy=OVERWRITE,
                  refresh=False)`` per batch, one request at a time (its API is synchronous);
  write_documents(wait_for) (extra line): the same with the library's default, a refresh waited for on every
                  batch: the baseline of the old 4.32x claim.

Printed and written to ``--out``: medians over ``--rounds`` (order rotated) of passages/s, the ratio to the ceiling
and to parallel_bulk, and client / node CPU milliseconds per passage; the targets are writer >= 0.9x the ceiling
and never below parallel_bulk. Where the time goes with vectors: the ceiling again into other vector mappings
(no vectors, ``index: false``, ``flat``, float ``hnsw``; the default is ``int8_hnsw``), and the client's cost per
passage to serialise with orjson (the writer) and with the json module.

Resuming an interrupted load with embeddings on (``--resume-passages`` N, 0: skip; ``--resume-only``: only this):
the first N passages of the sample, embedded with all-minilm-l6-v2 (warmed up before any timing), in
``--resume-batch-size``
chunks checkpointed after every chunk. For each method, in a fresh index:
  first half: the writer gets the first N/2 passages (``prepare=embed_stream``) and is stopped right after its
              checkpoint confirms passage N/2, before its final count check (as if the process were killed there);
  resume:     a new writer, same checkpoint, gets the whole N-passage stream:
    new (prepare): ``write(raw, prepare=embed_stream)``: the confirmed prefix is skipped on the raw stream, then
    embedded;
    old (wrapped): ``write(embed_stream(raw))``: the embedder wraps the stream before the writer skips, so the
                   skipped prefix is embedded again (the behaviour before the fix; the baseline).
The skip time is from the start of the resume's ``write`` call (checkpoint read and index check included) until
the writer asks for its first document past the confirmed prefix; the target is skip (new) / first half < 5%.
Every resume must end with the index holding exactly N documents, all with an embedding (count_ok). Results go to
``--resume-out`` (JSON) and the same name with .png.
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
import platform
import resource
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from itertools import islice
from pathlib import Path
from statistics import median

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import contextlib

import psutil
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy
from tqdm import tqdm

from icr2_components.kilt import KiltKnowledgeSource, build_sample
from icr2_components.paths import cache_dir
from icr2_components.stores.elasticsearch.store import build_elasticsearch_client, index_mapping, index_settings
from icr2_components.stores.elasticsearch.writer import (
    ElasticsearchStreamingWriter,
    StreamingWriterSettings,
    _source_serializer,
    document_to_source,
)
from icr2_components.stores.text_analysis import DEFAULT_ANALYZER, with_text_analysis

MIB = 1024 * 1024
CHECKPOINTS = (0.10, 0.25, 0.50, 0.75, 1.00)


def precomputed_embeddings(corpus: Path, passages: int = 0) -> dict[str, list[float]]:
    """all-MiniLM-L6-v2 embeddings of the sample's (first ``passages``) passages, computed once and cached as .npy."""
    import numpy as np

    documents = list(islice(KiltKnowledgeSource(corpus).documents(), passages or None))
    path = cache_dir() / "bench" / f"sample-minilm-{len(documents)}.npy"
    if path.exists():
        matrix = np.load(path)
    else:
        from icr2_components.stores.embedding import PassageEmbedder

        embedder = PassageEmbedder("all-minilm-l6-v2", batch_size=64, meta_fields=["title"], device="cpu")
        vectors = []
        for start in tqdm(range(0, len(documents), 256), desc="embedding the sample once (cached)", unit=" batches"):
            vectors.extend(d.embedding for d in embedder.embed_stream(documents[start : start + 256]))
        matrix = np.asarray(vectors, dtype=np.float32)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, matrix)
    return {d.id: row.tolist() for d, row in zip(documents, matrix, strict=True)}


def progress(
    stream: Iterable[Document], total: int, desc: str, on_item: Callable[[int], None] | None = None
) -> Iterator[Document]:
    # a manual bar (iterating tqdm(stream) would close the source when a consumer stops early)
    with tqdm(total=total, desc=desc, unit=" passages", smoothing=0.05, mininterval=1.0) as bar:
        for i, document in enumerate(stream, start=1):
            if on_item is not None:
                on_item(i)
            yield document
            if i % 500 == 0:
                bar.update(500)
        bar.update(total % 500)


class RssSampler:
    """The process RSS every ``interval`` seconds in a thread; keeps the peak."""

    def __init__(self, interval: float = 0.05) -> None:
        self.process = psutil.Process()
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


class Meter:
    """Wall time, the client's CPU time (this process, all threads) and the node's CPU time (from its own
    node stats) over a block. CPU seconds are much less sensitive than wall time to other work on the machine."""

    def __init__(self, client) -> None:
        self.client = client

    def _es_cpu(self) -> float:
        stats = self.client.nodes.stats(node_id="_local", metric="process").body
        return next(iter(stats["nodes"].values()))["process"]["cpu"]["total_in_millis"] / 1000

    def __enter__(self) -> Meter:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self._client_cpu = usage.ru_utime + usage.ru_stime
        self._es = self._es_cpu()
        self._load = os.getloadavg()[0]
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._start
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.client_cpu = usage.ru_utime + usage.ru_stime - self._client_cpu
        self.es_cpu = self._es_cpu() - self._es
        self.load = (self._load + os.getloadavg()[0]) / 2

    def result(self, method: str, stream: str, passages: int) -> dict:
        return {
            "method": method,
            "stream": stream,
            "passages": passages,
            "seconds": round(self.seconds, 2),
            "passages_per_second": round(passages / self.seconds, 1),
            "client_cpu_s": round(self.client_cpu, 2),
            "es_cpu_s": round(self.es_cpu, 2),
            "passages_per_cpu_second": round(passages / max(self.client_cpu + self.es_cpu, 1e-9), 1),
            "load_average_1min": round(self.load, 2),
        }


# -- the methods compared, each into a fresh index ------------------------------------------------------------

# Vector index variants measured on the ceiling (where the node's time goes with vectors); None: the mapping's
# default, which Elasticsearch 8.19 makes int8_hnsw (m 16, ef_construction 100) for a 384-d float vector.
VECTOR_VARIANTS = {
    "no vectors (same passages)": "drop",
    "vectors, index: false (stored, no graph)": {"index": False},
    "vectors, flat (no graph)": {"index_options": {"type": "flat"}},
    "vectors, hnsw (float graph)": {"index_options": {"type": "hnsw"}},
    "vectors, int8_hnsw (the default)": None,
}


def create_index(client, index: str, embedding_dim: int | None, variant: dict | None = None) -> None:
    """Our mapping and settings (what the writer creates, with the shipped configs' analyzer), refresh off,
    0 replicas: the same for every method."""
    mapping = with_text_analysis(index_mapping(embedding_dim), DEFAULT_ANALYZER)
    if variant:
        mapping["properties"]["embedding"].update(variant)
        if variant.get("index") is False:
            mapping["properties"]["embedding"].pop("similarity", None)
    settings = index_settings()
    settings["index"]["refresh_interval"] = "-1"
    client.indices.create(index=index, mappings=mapping, settings=settings)


def finish(client, index: str) -> int:
    client.indices.refresh(index=index)
    return int(client.count(index=index)["count"])


def serialised_bodies(documents: list[Document], batch_size: int) -> list[bytes]:
    """The NDJSON bulk bodies of ``documents``, serialised the way the writer serialises them."""
    dumps = _source_serializer()
    bodies = []
    for start in range(0, len(documents), batch_size):
        bodies.append(
            b"".join(
                b'{"index":{"_id":' + dumps(d.id) + b"}}\n" + dumps(document_to_source(d)) + b"\n"
                for d in documents[start : start + batch_size]
            )
        )
    return bodies


def run_ceiling(
    client, documents: list[Document], args, label: str, variant: dict | None = None, method: str = "ceiling"
) -> dict:
    """Replaying pre-serialised NDJSON bodies (serialised before the clock starts), ``--threads`` in flight."""
    from concurrent.futures import ThreadPoolExecutor

    index = f"{INDEX_PREFIX}-ceiling-{uuid.uuid4().hex[:8]}"
    dim = len(documents[0].embedding) if documents[0].embedding is not None else None
    create_index(client, index, dim, variant)
    bodies = serialised_bodies(documents, args.batch_size)

    def post(body: bytes) -> None:
        response = client.bulk(operations=body, index=index, filter_path="errors")
        assert not response.body.get("errors"), f"the node rejected documents of a replayed body in {index}"

    try:
        with Meter(client) as meter:
            with ThreadPoolExecutor(max_workers=args.threads) as pool:
                list(pool.map(post, bodies))
            count = finish(client, index)
    finally:
        client.indices.delete(index=index, ignore_unavailable=True)
    assert count == len(documents), (count, len(documents))
    return meter.result(method, label, len(documents))


def run_parallel_bulk(client, documents: list[Document], args, label: str) -> dict:
    """``elasticsearch.helpers.parallel_bulk``: same chunk size, ``--threads`` threads, the same sources."""
    from elasticsearch.helpers import parallel_bulk

    index = f"{INDEX_PREFIX}-parallel-{uuid.uuid4().hex[:8]}"
    create_index(client, index, len(documents[0].embedding) if documents[0].embedding is not None else None)
    try:
        with Meter(client) as meter:
            actions = ({"_index": index, "_id": d.id, "_source": document_to_source(d)} for d in documents)
            for ok, item in parallel_bulk(
                client, actions, thread_count=args.threads, chunk_size=args.batch_size, queue_size=args.threads
            ):
                assert ok, item
            count = finish(client, index)
    finally:
        client.indices.delete(index=index, ignore_unavailable=True)
    assert count == len(documents), (count, len(documents))
    return meter.result("parallel_bulk", label, len(documents))


def run_writer(client, url: str, documents: list[Document], args, label: str, measure_memory: bool = False) -> dict:
    """The project's writer, checkpoints on (every 10 chunks, fsynced), final refresh and count check included."""
    index = f"{INDEX_PREFIX}-writer-{uuid.uuid4().hex[:8]}"
    create_index(client, index, len(documents[0].embedding) if documents[0].embedding is not None else None)
    process = psutil.Process()
    with tempfile.TemporaryDirectory() as tmp:
        writer = ElasticsearchStreamingWriter(
            url,
            index,
            StreamingWriterSettings(
                batch_size=args.batch_size,
                thread_count=args.threads,
                checkpoint_path=Path(tmp) / "checkpoint.json",
                fingerprint=label,
                progress=False,
            ),
        )
        rss_before = process.memory_info().rss / MIB
        try:
            with RssSampler() as sampler, Meter(client) as meter:
                report = writer.write(iter(documents))
        finally:
            client.indices.delete(index=index, ignore_unavailable=True)
    assert report.count_ok and report.index_count == len(documents), report.summary()
    result = meter.result("writer", label, len(documents))
    result["bulk_requests"] = report.bulk_requests
    result["stream_seconds"] = round(report.stream_seconds, 3)
    # what the writer spends besides streaming: index checks, the settings switch and its restore (cluster-state
    # updates), the final refresh and count; fixed per load, so it fades on a large corpus
    result["fixed_seconds"] = round(meter.seconds - report.stream_seconds, 3)
    if measure_memory:
        result["rss_mib_before"] = round(rss_before, 1)
        result["peak_rss_mib_during"] = round(sampler.peak / MIB, 1)
    return result


def run_write_documents(url: str, documents: list[Document], args, label: str, refresh) -> dict:
    """The library's ``ElasticsearchDocumentStore.write_documents(batch, policy=OVERWRITE, refresh=...)`` per batch,
    as a user (or DocumentWriter) calls it: its own default index, one request at a time (its API is synchronous)."""
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore

    index = f"{INDEX_PREFIX}-plain-{uuid.uuid4().hex[:8]}"
    store = ElasticsearchDocumentStore(hosts=url, index=index)
    method = "write_documents(refresh=False)" if refresh is False else "write_documents(wait_for)"
    try:
        with Meter(store.client) as meter:
            for start in range(0, len(documents), args.batch_size):
                store.write_documents(
                    documents[start : start + args.batch_size], policy=DuplicatePolicy.OVERWRITE, refresh=refresh
                )
            count = finish(store.client, index)
    finally:
        store.client.indices.delete(index=index, ignore_unavailable=True)
    assert count == len(documents), (count, len(documents))
    return meter.result(method, label, len(documents))


def serialisation_costs(documents: list[Document], repeat: int = 3) -> dict:
    """Client-side microseconds per passage to turn Documents into NDJSON lines: orjson (the writer) against the
    standard json module (what a client without orjson does), best of ``repeat``; no node involved."""
    import json as std_json

    from elasticsearch.serializer import JsonSerializer

    default = JsonSerializer().default
    encoders = {
        "orjson": _source_serializer(),
        "json": lambda value: std_json.dumps(value, default=default, separators=(",", ":")).encode("utf-8"),
    }
    costs = {}
    for name, dumps in encoders.items():
        best = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            for d in documents:
                b'{"index":{"_id":' + dumps(d.id) + b"}}\n" + dumps(document_to_source(d)) + b"\n"
            best = min(best, time.perf_counter() - started)
        costs[name] = round(best / len(documents) * 1e6, 1)
    started = time.perf_counter()
    for d in documents:
        document_to_source(d)
    costs["document_to_source alone"] = round((time.perf_counter() - started) / len(documents) * 1e6, 1)
    return costs


# -- resuming an interrupted load, embeddings on ---------------------------------------------------------------


class Interrupted(RuntimeError):
    """Raised by :class:`InterruptedWriter` right after its checkpoint confirms the planned prefix."""


class InterruptedWriter(ElasticsearchStreamingWriter):
    """Our writer, stopped deterministically right after the checkpoint that confirms ``stop_at`` passages (before
    the final count check, so the checkpoint stays an interrupted load, not a completed one)."""

    def __init__(self, *args, stop_at: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stop_at = stop_at
        self.fired = False

    def _write_checkpoint(self, state: dict) -> None:
        super()._write_checkpoint(state)
        if not self.fired and state["position"] >= self.stop_at:
            self.fired = True
            raise Interrupted(f"stopped after the checkpoint at passage {state['position']}")


class RequestClock:
    """Wraps a stream; records when its ``nth`` document (1-based) is first asked for."""

    def __init__(self, stream: Iterable[Document], nth: int) -> None:
        self.stream = stream
        self.nth = nth
        self.at: float | None = None

    def __iter__(self) -> Iterator[Document]:
        # a generator body runs from the first next(): when the first document is asked for
        if self.nth == 1:
            self.at = time.perf_counter()
        for i, document in enumerate(self.stream, start=1):
            yield document
            if i + 1 == self.nth and self.at is None:
                self.at = time.perf_counter()


def resume_once(url: str, corpus: Path, total: int, embedder, args, method: str) -> dict:
    """One interrupted first half and one resume over the whole stream, into a fresh index; see the module docstring."""
    from itertools import islice

    half = total // 2
    index = f"bench-resume-{method}-{uuid.uuid4().hex[:8]}"
    client = build_elasticsearch_client(url)
    fingerprint = f"resume bench: sample, first {total} passages, {embedder.model}"

    def raw(limit: int) -> Iterator[Document]:
        return islice(KiltKnowledgeSource(corpus).documents(), limit)

    options = {
        "batch_size": args.resume_batch_size,
        "thread_count": args.threads,
        "checkpoint_every": 1,
        "fingerprint": fingerprint,
    }
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "checkpoint.json"
        try:
            settings = StreamingWriterSettings(checkpoint_path=checkpoint, progress=False, **options)
            first = InterruptedWriter(url, index, settings, stop_at=half)
            with Meter(client) as first_meter, contextlib.suppress(Interrupted):
                first.write(progress(raw(half), half, f"first half ({method})"), prepare=embedder.embed_stream)
            assert first.fired, "the first half ended without reaching its checkpoint"
            saved = json.loads(checkpoint.read_text())
            assert saved["position"] == half and not saved.get("completed"), saved

            writer = ElasticsearchStreamingWriter(
                url, index, StreamingWriterSettings(checkpoint_path=checkpoint, progress=True, **options)
            )
            if method == "new":
                clocks: list[RequestClock] = []

                def prepare(stream: Iterable[Document]) -> Iterator[Document]:
                    clocks.append(RequestClock(embedder.embed_stream(stream), 1))
                    return iter(clocks[0])

                documents: Iterable[Document] = progress(raw(total), total, "resume, skip then embed (new)")
                with Meter(client) as meter:
                    started = time.perf_counter()
                    report = writer.write(documents, prepare=prepare)
                clock = clocks[0]
            else:
                # the old way: the embedder wraps the stream before the writer skips the confirmed prefix
                clock = RequestClock(
                    embedder.embed_stream(progress(raw(total), total, "resume, embed then skip (old)")), half + 1
                )
                with Meter(client) as meter:
                    started = time.perf_counter()
                    report = writer.write(clock)
            with_embedding = int(client.count(index=index, query={"exists": {"field": "embedding"}})["count"])
        finally:
            client.indices.delete(index=index, ignore_unavailable=True)
    skip_seconds = (clock.at - started) if clock.at is not None else float("nan")
    ids = [d.id for d in raw(total)]
    checks = {
        "resumed_from": report.resumed_from,
        "index_count": report.index_count,
        "with_embedding": with_embedding,
        "unique_ids_in_stream": len(set(ids)),
        "count_ok": bool(
            report.count_ok
            and report.resumed_from == half
            and report.index_count == total == len(set(ids))
            and with_embedding == total
        ),
    }
    return {
        "method": method,
        "passages": total,
        "first_half_passages": half,
        "first_half_seconds": round(first_meter.seconds, 2),
        "skip_seconds": round(skip_seconds, 3),
        "resume_seconds": round(meter.seconds, 2),
        "skip_over_first_half": round(skip_seconds / first_meter.seconds, 4),
        "resume_client_cpu_s": round(meter.client_cpu, 2),
        "load_average_1min": round((first_meter.load + meter.load) / 2, 2),
        **checks,
    }


def run_resume(url: str, corpus: Path, env: dict, args) -> int:
    from icr2_components.stores.embedding import PassageEmbedder

    available = sum(1 for _ in KiltKnowledgeSource(corpus).passages())
    total = min(args.resume_passages, available)
    total -= total % 2
    embedder = PassageEmbedder("all-minilm-l6-v2", batch_size=64, meta_fields=["title"], device="cpu")
    embedder.embed_texts(["warm-up"])  # the model load is not part of any timing
    print(
        f"resume: the first {total} of the sample's {available} passages, embeddings on ({embedder.model}, dim "
        f"{embedder.dimension}), "
        f"batch {args.resume_batch_size}, checkpoint after every batch, {args.resume_rounds} round(s)"
    )

    methods = ["new", "old"]
    runs = []
    for round_index in range(args.resume_rounds):
        order = methods[round_index % 2 :] + methods[: round_index % 2]
        for method in order:
            result = resume_once(url, corpus, total, embedder, args, method)
            result["round"] = round_index + 1
            runs.append(result)
            print(
                f"  round {round_index + 1}: {method}: first half {result['first_half_seconds']:.1f}s, skip "
                f"{result['skip_seconds']:.3f}s, "
                f"whole resume {result['resume_seconds']:.1f}s, index holds {result['index_count']} (count_ok "
                f"{result['count_ok']}; load {result['load_average_1min']})"
            )

    def med(method: str, key: str) -> float:
        return median([r[key] for r in runs if r["method"] == method])

    first_half = median([r["first_half_seconds"] for r in runs])
    summary = {
        "passages": total,
        "first_half_passages": total // 2,
        "batch_size": args.resume_batch_size,
        "rounds": args.resume_rounds,
        "first_half_seconds": round(first_half, 2),
        "skip_seconds_new": round(med("new", "skip_seconds"), 3),
        "skip_seconds_old": round(med("old", "skip_seconds"), 2),
        "resume_seconds_new": round(med("new", "resume_seconds"), 2),
        "resume_seconds_old": round(med("old", "resume_seconds"), 2),
        "skip_over_first_half_new": round(med("new", "skip_over_first_half"), 4),
        "skip_over_first_half_old": round(med("old", "skip_over_first_half"), 4),
        "count_ok": all(r["count_ok"] for r in runs),
    }
    summary["skip_old_over_new"] = round(summary["skip_seconds_old"] / max(summary["skip_seconds_new"], 1e-9), 1)
    summary["meets_5_percent"] = summary["skip_over_first_half_new"] < 0.05
    env = dict(env, load_average_at_end=[round(x, 2) for x in os.getloadavg()])

    print()
    print(f"resume after {total // 2} of {total} passages, embeddings on (medians over {args.resume_rounds} round(s)):")
    print(f"  first half (embed + write {total // 2} passages):     {summary['first_half_seconds']:>8.2f} s")
    print(
        f"  skip the confirmed prefix, new (skip, then embed): {summary['skip_seconds_new']:>8.3f} s  "
        f"= {100 * summary['skip_over_first_half_new']:.2f}% of the first half "
        f"({'meets' if summary['meets_5_percent'] else 'MISSES'} the < 5% target)"
    )
    print(
        f"  skip the confirmed prefix, old (embed, then skip): {summary['skip_seconds_old']:>8.2f} s  "
        f"= {100 * summary['skip_over_first_half_old']:.1f}% of the first half; old / new "
        f"{summary['skip_old_over_new']}x"
    )
    print(f"  whole resume: new {summary['resume_seconds_new']:.1f} s, old {summary['resume_seconds_old']:.1f} s")
    print(
        f"  count check: index holds {total} documents, all embedded, resumed from {total // 2}: "
        f"{'ok' if summary['count_ok'] else 'FAILED'}"
    )

    out = Path(args.resume_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": env,
        "summary": summary,
        "runs": runs,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    plot_resume(summary, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0 if summary["count_ok"] else 1


def plot_resume(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [
        f"first half\n({summary['first_half_passages']} embedded)",
        "skip prefix\nnew: skip, then embed",
        "skip prefix\nold: embed, then skip",
        "whole resume\nnew",
        "whole resume\nold",
    ]
    values = [
        summary["first_half_seconds"],
        summary["skip_seconds_new"],
        summary["skip_seconds_old"],
        summary["resume_seconds_new"],
        summary["resume_seconds_old"],
    ]
    colors = ["grey", "tab:green", "tab:red", "tab:green", "tab:red"]
    figure, axis = plt.subplots(figsize=(8, 3.8))
    bars = axis.bar(range(len(values)), values, color=colors)
    for bar, value in zip(bars, values, strict=True):
        axis.annotate(
            f"{value:.2f} s" if value < 10 else f"{value:.1f} s",
            (bar.get_x() + bar.get_width() / 2, value),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    axis.axhline(
        0.05 * summary["first_half_seconds"],
        color="black",
        linestyle="--",
        linewidth=0.8,
        label="5% of the first half (target for the skip)",
    )
    axis.set_xticks(range(len(values)), labels, fontsize=8)
    axis.set_ylabel("seconds")
    axis.set_title(
        f"Resume after {summary['first_half_passages']} of {summary['passages']} passages, MiniLM embeddings on"
    )
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def machine() -> dict:
    memory = psutil.virtual_memory()
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(memory.total / 1024**3, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def materialise(
    corpus: Path, times: int, passages: int, embeddings: dict[str, list[float]] | None = None
) -> list[Document]:
    """The first ``passages`` (0: all) of the sample, ``times`` over with their own ids, held in memory so that every
    method gets the very same Documents and no method pays for reading the corpus."""
    base = list(islice(KiltKnowledgeSource(corpus).documents(), passages or None))
    out = []
    for copy in range(times):
        for document in base:
            embedding = embeddings[document.id] if embeddings is not None else None
            out.append(
                replace(document, id=document.id if copy == 0 else f"{document.id}-x{copy}", embedding=embedding)
            )
    return out


INDEX_PREFIX = "icr2-bench"  # --index-prefix
THROUGHPUT_METHODS = (
    "ceiling",
    "parallel_bulk",
    "writer",
    "write_documents(refresh=False)",
    "write_documents(wait_for)",
)


def run_method(
    method: str, client, url: str, documents: list[Document], args, label: str, measure_memory: bool
) -> dict:
    if method == "ceiling":
        return run_ceiling(client, documents, args, label)
    if method == "parallel_bulk":
        return run_parallel_bulk(client, documents, args, label)
    if method == "writer":
        return run_writer(client, url, documents, args, label, measure_memory=measure_memory)
    if method == "write_documents(refresh=False)":
        return run_write_documents(url, documents, args, label, refresh=False)
    if method == "write_documents(wait_for)":
        return run_write_documents(url, documents, args, label, refresh="wait_for")
    raise ValueError(method)


def run_throughput(url: str, client, corpus: Path, env: dict, args) -> int:
    streams: list[tuple[str, list[Document]]] = []
    plain = materialise(corpus, args.times, args.passages)
    streams.append((f"sample x{args.times}, no vectors", plain))
    if args.embedding_times > 0:
        embeddings = precomputed_embeddings(corpus, args.passages)
        streams.append(
            (
                f"sample x{args.embedding_times}, 384-d vectors",
                materialise(corpus, args.embedding_times, args.passages, embeddings),
            )
        )
    methods = [m for m in THROUGHPUT_METHODS if not (args.no_wait_for and m == "write_documents(wait_for)")]
    print(f"same passages for every method (in memory), batch {args.batch_size}, {args.threads} requests in flight "
          f"(write_documents: 1, its API is synchronous); {args.rounds} round(s), order rotated, medians")

    runs: list[dict] = []
    memory: dict | None = None
    for round_index in range(args.rounds):
        order = methods[round_index % len(methods) :] + methods[: round_index % len(methods)]
        for label, documents in streams:
            for method in order:
                result = run_method(
                    method, client, url, documents, args, label, measure_memory=memory is None and method == "writer"
                )
                if memory is None and method == "writer":
                    memory = result
                result["round"] = round_index + 1
                runs.append(result)
                if method == "writer":
                    # informative, never a verdict: the same run without its fixed per-load cost (index checks, the
                    # settings switch and restore, the final refresh and count, which the ceiling's time does include)
                    phase = dict(
                        result,
                        method="writer, stream phase only (informative)",
                        seconds=result["stream_seconds"],
                        passages_per_second=round(len(documents) / max(result["stream_seconds"], 1e-9), 1),
                    )
                    runs.append(phase)
                print(
                    f"  round {round_index + 1}: {method:<31} {label:<28} {result['passages_per_second']:>9.1f} "
                    "passages/s "
                    f"(client CPU {result['client_cpu_s']:.1f}s, node CPU {result['es_cpu_s']:.1f}s, load "
                    f"{result['load_average_1min']})"
                )
            if documents[0].embedding is not None and not args.no_vector_variants:
                # where the time goes with vectors: the ceiling into other vector mappings (the default is 'ceiling')
                for variant_label, variant in VECTOR_VARIANTS.items():
                    if variant is None:
                        continue
                    docs = [replace(d, embedding=None) for d in documents] if variant == "drop" else documents
                    result = run_ceiling(
                        client,
                        docs,
                        args,
                        label,
                        None if variant == "drop" else variant,
                        method=f"ceiling, {variant_label}",
                    )
                    result["round"] = round_index + 1
                    runs.append(result)
                    print(
                        f"  round {round_index + 1}: {result['method']:<52} {result['passages_per_second']:>9.1f} "
                        "passages/s "
                        f"(node CPU {result['es_cpu_s']:.1f}s)"
                    )

    summary = []
    for label, documents in streams:
        names = [r["method"] for r in runs if r["stream"] == label]
        for method in dict.fromkeys(names):
            mine = [r for r in runs if r["stream"] == label and r["method"] == method]
            summary.append({
                "stream": label, "method": method, "passages": len(documents), "runs": len(mine),
                "median_passages_per_second": round(median([r["passages_per_second"] for r in mine]), 1),
                "median_seconds": round(median([r["seconds"] for r in mine]), 2),
                "client_cpu_ms_per_passage": round(
                    1000 * median([r["client_cpu_s"] for r in mine]) / len(documents), 3),
                "node_cpu_ms_per_passage": round(1000 * median([r["es_cpu_s"] for r in mine]) / len(documents), 3),
            })  # fmt: skip

    def pick(label: str, method: str) -> dict:
        return next(s for s in summary if s["stream"] == label and s["method"] == method)

    def per_round(label: str, method: str, against: str) -> list[float]:
        a = {r["round"]: r["passages_per_second"] for r in runs if r["stream"] == label and r["method"] == method}
        b = {r["round"]: r["passages_per_second"] for r in runs if r["stream"] == label and r["method"] == against}
        return [round(a[k] / b[k], 2) for k in sorted(a) if k in b]

    for s in summary:
        s["x_ceiling"] = round(
            s["median_passages_per_second"] / pick(s["stream"], "ceiling")["median_passages_per_second"], 2
        )
        s["x_parallel_bulk"] = round(
            s["median_passages_per_second"] / pick(s["stream"], "parallel_bulk")["median_passages_per_second"], 2
        )

    verdicts = {}
    for label, _ in streams:
        writer = pick(label, "writer")
        verdicts[label] = {
            "writer_x_ceiling": writer["x_ceiling"],
            "writer_x_parallel_bulk": writer["x_parallel_bulk"],
            "per_round_x_ceiling": per_round(label, "writer", "ceiling"),
            "per_round_x_parallel_bulk": per_round(label, "writer", "parallel_bulk"),
            "meets_0_9_ceiling": writer["x_ceiling"] >= 0.9,
            "not_below_parallel_bulk": writer["x_parallel_bulk"] >= 1.0,
        }
    serialisation = {label: serialisation_costs(documents[: min(len(documents), 2000)]) for label, documents in streams}
    env = dict(env, load_average_at_end=[round(x, 2) for x in os.getloadavg()])

    print()
    print(
        f"{'stream':<28} {'method':<56} {'passages/s':>10} {'x ceiling':>9} {'x p_bulk':>9} {'client ms/p':>11} "
        f"{'node ms/p':>10}"
    )
    for s in summary:
        print(
            f"{s['stream']:<28} {s['method']:<56} {s['median_passages_per_second']:>10.1f} {s['x_ceiling']:>9.2f} "
            f"{s['x_parallel_bulk']:>9.2f} "
            f"{s['client_cpu_ms_per_passage']:>11.3f} {s['node_cpu_ms_per_passage']:>10.3f}"
        )
    print()
    for label, v in verdicts.items():
        print(
            f"writer, {label}: {v['writer_x_ceiling']:.2f}x the ceiling "
            f"({'meets' if v['meets_0_9_ceiling'] else 'BELOW'} the 0.9x target; "
            f"per round {v['per_round_x_ceiling']}), {v['writer_x_parallel_bulk']:.2f}x parallel_bulk "
            f"({'not below' if v['not_below_parallel_bulk'] else 'BELOW'} it; per round "
            f"{v['per_round_x_parallel_bulk']})"
        )
    for label, costs in serialisation.items():
        print(f"client-side serialisation, {label}: " + ", ".join(f"{k} {v} us/passage" for k, v in costs.items()))
    for label, _ in streams:
        fixed = [r["fixed_seconds"] for r in runs if r["stream"] == label and r["method"] == "writer"]
        print(
            f"writer's fixed cost per load, {label}: median {median(fixed):.3f}s (index checks, settings switch and "
            "restore, final refresh and count)"
        )
    if memory is not None:
        print(
            f"RSS of the writer over {memory['passages']} passages: before {memory['rss_mib_before']} MiB, peak during "
            f"{memory['peak_rss_mib_during']} MiB"
        )

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": env,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "rounds": args.rounds,
        "summary": summary,
        "verdicts": verdicts,
        "serialisation_us_per_passage": serialisation,
        "memory": {k: memory[k] for k in ("stream", "passages", "rss_mib_before", "peak_rss_mib_during")}
        if memory
        else None,
        "runs": runs,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("ICR2_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument(
        "--times", type=int, default=5, help="copies of the sample in the stream without vectors (default 5)"
    )
    parser.add_argument(
        "--embedding-times", type=int, default=2, help="copies of the sample in the stream with vectors (0: skip)"
    )
    parser.add_argument(
        "--passages",
        type=int,
        default=0,
        help="only the first N passages of the sample per copy (0: all; a quick check)",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds; the methods' order rotates from round to round, medians reported"
    )
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument(
        "--threads", type=int, default=2, help="bulk requests in flight (ceiling, parallel_bulk, writer)"
    )
    parser.add_argument(
        "--no-wait-for",
        action="store_true",
        help="skip the write_documents(wait_for) extra line (the library's default)",
    )
    parser.add_argument("--no-vector-variants", action="store_true", help="skip the ceiling into other vector mappings")
    parser.add_argument("--out", default="bench/results/indexing.json")
    parser.add_argument(
        "--resume-passages", type=int, default=0, help="passages of the resume measurement, embeddings on (0: skip it)"
    )
    parser.add_argument(
        "--resume-batch-size",
        type=int,
        default=100,
        help="chunk size of the resume measurement (checkpoint after each)",
    )
    parser.add_argument(
        "--resume-rounds", type=int, default=1, help="rounds of the resume measurement (new/old order rotating)"
    )
    parser.add_argument("--resume-only", action="store_true", help="only the resume measurement")
    parser.add_argument("--resume-out", default="bench/results/indexing_resume.json")
    parser.add_argument(
        "--index-prefix",
        default="icr2-bench",
        help="the bench's (temporary) indices are named <prefix>-<method>-<random>",
    )
    args = parser.parse_args(argv)
    global INDEX_PREFIX
    INDEX_PREFIX = args.index_prefix
    for name in ("times", "rounds", "batch_size", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.passages < 0 or args.embedding_times < 0:
        parser.error("--passages and --embedding-times must be >= 0")

    client = build_elasticsearch_client(args.url, request_timeout=120)
    try:
        info = client.info().body
    except Exception as error:
        print(
            f"No Elasticsearch at {args.url} ({error}); start one with `bash scripts/elasticsearch.sh start`.",
            file=sys.stderr,
        )
        return 1
    corpus = build_sample().corpus
    env = machine()
    env["elasticsearch"] = info["version"]["number"]
    print(
        f"Elasticsearch {env['elasticsearch']} at {args.url}; {env['cpus']} CPUs, {env['memory_gib']} GiB; load "
        f"average {env['load_average_at_start']}"
    )
    if args.resume_only:
        return run_resume(args.url, corpus, env, args)
    code = run_throughput(args.url, client, corpus, env, args)
    if args.resume_passages > 0:
        print()
        code = run_resume(args.url, corpus, env, args) or code
    return code


if __name__ == "__main__":
    sys.exit(main())
