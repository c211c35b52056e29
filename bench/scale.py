"""Cost against corpus size: Elasticsearch and the embedded in-memory store at 10K, 100K and 1M passages, with a
projection to the full KILT knowledge source (about 36M passages).

    bash scripts/elasticsearch.sh start
    PYTHONPATH=$PWD .venv/bin/python bench/scale.py [--sizes 10000,100000,1000000] [--vector-index default]
        [--queries 200] [--warmup 20] [--memory-limit-gb 8] [--out bench/results/scale]
        [--vectors-not-in-source]
    PYTHONPATH=$PWD .venv/bin/python bench/scale.py --sizes 2000,10000          # a check in a few minutes

The corpus (``bench/scale_corpus.py``): the bundled sample's real Wikipedia passages with their real
all-MiniLM-L6-v2 vectors, then GENERATED passages up to each size (id prefix ``gen-``, meta ``generated: true``;
random bigrams of the real passages, vectors drawn around real ones, seeded by ``(--seed, position)``). Generated
text is for COST only: no quality figure may be taken from these indexes. The queries are real NQ-sample questions
(``--queries`` timed after ``--warmup`` untimed), embedded once before any timing: the latencies are the store's.

**Elasticsearch, at each size** (an index ``<--index-prefix>-<size>``, deleted afterwards unless ``--keep``),
built through the project's own path: ``IndexHandle.build`` with the ``--es-config`` index config (the
``ElasticsearchStreamingWriter``: bulk, checkpoints, count check; BM25 with the config's analyzer over content and
title; the ``dense_vector`` with ``--vector-index``, by default the project's layout default, which is the
node's ``int8_hnsw``, m 16, ef_construction 100):

- indexing passages/s: passages over the wall time of ``build`` (generating the passages included; the cost of
  generating alone is measured and printed, so it can be taken out), client and node CPU seconds;
- disk: the primary store size from ``_stats`` after the writer's final refresh, NOT force-merged by default
  (the index as a load leaves it; segment count reported); ``--force-merge`` merges to one segment first and
  times it;
- RSS of the Elasticsearch process (node pid from ``_nodes/_local/process``, read with psutil: peak while
  loading, and after the queries) and of this Python process (peak while loading);
- query latency p50/p99 through ``IndexHandle.retrieve`` (method ``bm25``, ``dense`` = kNN, ``hybrid`` = RRF of
  both), top ``--top-k``.

**The in-memory store, at each size until it stops** (the project's default store, ``--in-memory-config``:
Haystack's ``InMemoryDocumentStore`` saved as JSON, ``bm25s`` BM25 over content and title, an exact cosine
matrix), each size in a fresh child process so that its RSS is the store's: build time (``IndexHandle.build``:
write, count check, save), the saved file's size, the first BM25 and first dense query (they build the bm25s
index and the vector matrix), RSS (peak), and the same latencies. **It stops** at the first size where any of:
the child's peak RSS passes ``--memory-limit-gb`` (checked while building: the build is abandoned there), the
build passes ``--max-build-minutes``, or a method's p99 passes ``--max-p99-ms``. Larger sizes are then not
tried, nor is a size whose RSS, projected linearly from the sizes measured, would pass the limit. The report
says where and why.

**Baseline and projection** (``bench/scale_report.py``): every size against the smallest size of the run, and
each cost fitted against size and projected to 36M passages (full KILT); a lower bound for the indexing hours.

Outputs under ``--out``: ``scale.json`` (everything, with the command, the machine, the node and the load
average), ``scale.md`` (the tables) and ``scale.png`` (cost against size, log x, the 36M projection marked).
Figures mean something only on idle cores: on 2 cores the node and the client share the CPUs.
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import contextlib
import json
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:  # the sibling modules below, also when this file is loaded by path (tests)
    sys.path.insert(0, str(BENCH_DIR))

import numpy as np  # noqa: E402
from haystack import Document  # noqa: E402
from scale_corpus import (  # noqa: E402
    GENERATED_PREFIX,
    NoisyVectorSampler,
    ScaleCorpus,
    build_corpus,
    load_questions,
)
from scale_report import (  # noqa: E402
    GIB,
    KILT_FULL_PASSAGES,
    METHOD_LABELS,
    MIB,
    baseline_ratios,
    evaluate,
    format_cost,
    human_bytes,
    linear_fit,
    markdown,
    plot,
    projections,
)

METHODS = ("bm25", "dense", "hybrid")
VECTOR_INDEX_CHOICES = ("default", "hnsw", "int8_hnsw", "flat", "int8_flat", "bm25_only")


# -------------------------------------------------------------------------------------- the bench's handle


class PrecomputedQueries:
    """The handle's embedder for the bench: passages pass through with the vectors they carry (real or drawn),
    queries get the vectors computed once before timing (``KeyError`` for any other query)."""

    def __init__(self, embedder, queries: dict[str, list[float]]) -> None:
        self.inner = embedder
        self.queries = queries

    def embed_query(self, query: str) -> list[float]:
        return self.queries[query]

    def embed_stream(self, documents):
        for document in documents:
            if document.embedding is None:
                raise ValueError(
                    f"passage {document.id} has no vector: the bench gives every passage one (real or drawn)"
                )
            yield document

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def bench_handle(config, query_vectors: dict[str, list[float]] | None):
    """An ``IndexHandle`` for ``config`` whose embedder takes precomputed vectors (see :class:`PrecomputedQueries`)."""
    from icr2_components.stores.handle import IndexHandle

    handle = IndexHandle(config)
    if handle._embedder is not None:  # the bench swaps in precomputed vectors, nothing else changes
        handle._embedder = PrecomputedQueries(handle._embedder, query_vectors or {})
    return handle


# ------------------------------------------------------------------------------------------------ measuring


class PeakRss:
    """RSS of a process (this one by default) every ``interval`` seconds in a thread; keeps the peak."""

    def __init__(self, pid: int | None = None, interval: float = 0.2, limit: int | None = None, on_limit=None) -> None:
        import psutil

        self.process = psutil.Process(pid) if pid else psutil.Process()
        self.interval = interval
        self.peak = 0
        # called (from the sampling thread) the first time the RSS passes ``limit`` bytes
        self.limit = limit
        self.on_limit = on_limit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        return int(self.process.memory_info().rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                current = self.rss()
                self.peak = max(self.peak, current)
                if self.limit is not None and current > self.limit and self.on_limit is not None:
                    self.on_limit(current)
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(Exception):
            self.peak = max(self.peak, self.rss())


def percentiles(milliseconds: list[float]) -> dict[str, float]:
    values = np.asarray(milliseconds, dtype=np.float64)
    return {"p50_ms": round(float(np.percentile(values, 50)), 3), "p99_ms": round(float(np.percentile(values, 99)), 3),
            "mean_ms": round(float(values.mean()), 3), "queries": int(values.size)}


def measure_latencies(handle, questions: list[str], warmup: int, top_k: int, methods: Sequence[str]) -> dict[str, dict]:
    """p50/p99 per method through ``IndexHandle.retrieve``; the first ``warmup`` questions answered untimed."""
    from tqdm import tqdm

    results = {}
    for method in methods:
        for question in questions[:warmup]:
            handle.retrieve(question, method=method, top_k=top_k)
        times, empty = [], 0
        for question in tqdm(
            questions[warmup:], desc=f"  {METHOD_LABELS[method]} queries", unit=" q", leave=False, mininterval=1.0
        ):
            start = time.perf_counter()
            hits = handle.retrieve(question, method=method, top_k=top_k)
            times.append(1000 * (time.perf_counter() - start))
            empty += not hits
        results[method] = {**percentiles(times), "empty_answers": empty}
    return results


def generation_cost(corpus: ScaleCorpus, passages: int, with_vectors: bool) -> float:
    """Microseconds per generated passage (text and vector), measured alone on ``passages`` of them."""
    start = time.perf_counter()
    for position in range(passages):
        corpus.text.passage(position)
        if with_vectors and corpus.vectors is not None:
            corpus.vectors.vector(position)
    return 1e6 * (time.perf_counter() - start) / passages


def mean_seed_cosine(sampler: NoisyVectorSampler, count: int = 500) -> float:
    cosines = []
    for position in range(count):
        vector, source = sampler.vector(position)
        cosines.append(float(vector @ sampler.seeds[source]))
    return float(np.mean(cosines))


def machine_info() -> dict:
    import psutil

    cpu_model = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model,
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


# -------------------------------------------------------------------------------------------- Elasticsearch


def es_node(client) -> dict:
    """The node's version, heap, pid (``_nodes/_local/process``) and whether this machine can read its RSS."""
    import psutil

    info = client.info().body
    nodes = client.nodes.info(node_id="_local", metric="process,jvm").body["nodes"]
    node = next(iter(nodes.values()))
    pid = node.get("process", {}).get("id")
    readable = False
    if pid:
        with contextlib.suppress(Exception):
            readable = psutil.Process(int(pid)).is_running()
    return {"version": info["version"]["number"], "pid": pid, "rss_readable": readable,
            "heap_max_bytes": node.get("jvm", {}).get("mem", {}).get("heap_max_in_bytes")}


def es_cpu_seconds(client) -> float:
    stats = client.nodes.stats(node_id="_local", metric="process").body
    return next(iter(stats["nodes"].values()))["process"]["cpu"]["total_in_millis"] / 1000


def es_config_for(args, size: int, embedding_on: bool):
    from icr2_components.stores import load_index_config

    # corpus.path: sample, embedding.device: cpu so that any Elasticsearch config works here (the full-KILT one names
    # a corpus file and a GPU); the passages come from the bench, the model only gives the vector's dimension
    overrides: dict[str, Any] = {
        "store.hosts": args.url,
        "store.index": f"{args.index_prefix}-{size}",
        "corpus.path": "sample",
        "embedding.device": "cpu",
        "writer.checkpoint_path": str(Path(args.tmp) / f"{args.index_prefix}-{size}.checkpoint.json"),
        "embedding.enabled": embedding_on,
    }
    if args.batch_size:
        overrides["writer.batch_size"] = args.batch_size
    if args.threads:
        overrides["writer.thread_count"] = args.threads
    if embedding_on and args.vector_index != "default":
        options: dict[str, Any] = {"type": args.vector_index}
        if args.hnsw_m is not None:
            options["m"] = args.hnsw_m
        if args.hnsw_ef_construction is not None:
            options["ef_construction"] = args.hnsw_ef_construction
        overrides["store.vector_index"] = options
    if embedding_on and args.vectors_not_in_source:
        overrides["store.vectors_in_source"] = False
    return load_index_config(args.es_config, overrides=overrides)


def run_elasticsearch(
    size: int, corpus: ScaleCorpus, args, client, node: dict, questions: list[str], query_vectors: dict
) -> dict:
    from icr2_components.stores.elasticsearch.index_layout import IndexLayout

    embedding_on = args.vector_index != "bm25_only"
    config = es_config_for(args, size, embedding_on)
    index = config.store.index
    if client.indices.exists(index=index):
        if not args.replace:
            raise SystemExit(
                f"index '{index}' already exists at {args.url} (left by --keep?): delete it, pass --replace, or choose "
                "--index-prefix."
            )
        client.indices.delete(index=index)
    checkpoint = Path(config.writer.checkpoint_path)
    checkpoint.unlink(missing_ok=True)
    handle = bench_handle(config, query_vectors)
    layout = IndexLayout.from_config(config).describe()
    generated = corpus.generated_count(size)
    print(
        f"\n[elasticsearch] {size:,} passages ({size - generated:,} real, {generated:,} generated) into '{index}': "
        f"{layout}"
    )
    es_rss = PeakRss(int(node["pid"])) if node["rss_readable"] else None
    result: dict[str, Any] = {
        "store": "elasticsearch",
        "passages": size,
        "real_passages": size - generated,
        "generated_passages": generated,
        "index": index,
        "layout": layout,
    }
    try:
        load = os.getloadavg()[0]
        cpu_before, node_cpu_before = time.process_time(), es_cpu_seconds(client)
        with PeakRss() as python_rss, (es_rss if es_rss is not None else contextlib.nullcontext()):
            start = time.perf_counter()
            report = handle.build(progress=True, documents=corpus.documents(size, with_vectors=embedding_on))
            seconds = time.perf_counter() - start
        if not report.count_ok:
            raise RuntimeError(f"{index}: the count check failed ({report.as_dict()})")
        stream_seconds = report.details.get("stream_seconds")
        result.update({
            "index_seconds": round(seconds, 2), "passages_per_s": round(size / seconds, 1),
            "stream_seconds": stream_seconds,
            "stream_passages_per_s": round(size / stream_seconds, 1) if stream_seconds else None,
            "client_cpu_s": round(time.process_time() - cpu_before, 2),
            "node_cpu_s": round(es_cpu_seconds(client) - node_cpu_before, 2),
            "python_peak_rss_bytes": python_rss.peak, "es_peak_rss_bytes_loading": es_rss.peak if es_rss else None,
            "load_average_1min": round((load + os.getloadavg()[0]) / 2, 2),
        })  # fmt: skip
        if args.force_merge:
            start = time.perf_counter()
            client.options(request_timeout=24 * 3600).indices.forcemerge(
                index=index, max_num_segments=1, wait_for_completion=True
            )
            client.indices.refresh(index=index)
            result["force_merge_seconds"] = round(time.perf_counter() - start, 2)
        stats = client.indices.stats(index=index, metric="store,segments,docs").body["_all"]["primaries"]
        result.update({"disk_bytes": int(stats["store"]["size_in_bytes"]), "segments": int(stats["segments"]["count"]),
                       "docs": int(stats["docs"]["count"]), "force_merged": bool(args.force_merge)})
        result["disk_bytes_per_passage"] = round(result["disk_bytes"] / size, 1)
        methods = METHODS if embedding_on else ("bm25",)
        result["latency"] = measure_latencies(handle, questions, args.warmup, args.top_k, methods)
        if es_rss is not None:
            result["es_rss_bytes_after"] = es_rss.rss()
        print(
            f"  {result['passages_per_s']:,.0f} passages/s ({seconds:.1f}s), disk {result['disk_bytes'] / MIB:,.1f} "
            "MiB "
            f"({result['segments']} segments), Python peak RSS {python_rss.peak / MIB:,.0f} MiB"
            + (f", node RSS peak {es_rss.peak / MIB:,.0f} MiB" if es_rss else "")
            + "; "
            + ", ".join(
                f"{METHOD_LABELS[m]} p50 {v['p50_ms']:.1f} / p99 {v['p99_ms']:.1f} ms"
                for m, v in result["latency"].items()
            )
        )
    finally:
        if not args.keep:
            client.indices.delete(index=index, ignore_unavailable=True)
            result["deleted"] = True
        checkpoint.unlink(missing_ok=True)
        Path(str(checkpoint) + ".failures.jsonl").unlink(missing_ok=True)
    return result


# ------------------------------------------------------------------------------------------ in-memory store


class StopBuilding(RuntimeError):
    """The in-memory build passed a limit; ``reason`` says which, ``at`` after how many passages."""

    def __init__(self, reason: str, at: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.at = at


def guarded(stream: Iterator[Document], deadline: float, progress: dict) -> Iterator[Document]:
    """``stream``, abandoned (:class:`StopBuilding`) once the clock passes ``deadline``; counts into ``progress``."""
    for count, document in enumerate(stream, start=1):
        progress["streamed"] = count
        if count % 500 == 0 and time.perf_counter() > deadline:
            raise StopBuilding("the build passed --max-build-minutes", count)
        yield document


def in_memory_worker(spec_path: Path) -> int:
    """One size of the in-memory store, in a process of its own; writes its result as JSON beside the spec."""
    from icr2_components.stores import load_index_config

    spec = json.loads(spec_path.read_text())
    args = argparse.Namespace(**spec["args"])
    size = spec["size"]
    corpus = build_corpus(args)
    questions = spec["questions"]
    query_vectors = {q: v for q, v in zip(questions, np.load(spec["query_vectors"]).tolist(), strict=True)}
    embedding_on = args.vector_index != "bm25_only"
    persist = Path(args.tmp) / f"{args.index_prefix}-{size}-in-memory.json"
    config = load_index_config(
        args.in_memory_config,
        overrides={
            "name": f"{args.index_prefix}-{size}",
            "store.persist_path": str(persist),
            "corpus.path": "sample",
            "embedding.enabled": embedding_on,
            "embedding.device": "cpu",
        },
    )
    handle = bench_handle(config, query_vectors)
    import psutil

    result: dict[str, Any] = {
        "store": "in_memory",
        "passages": size,
        "generated_passages": corpus.generated_count(size),
    }
    process = psutil.Process()
    result["rss_bytes_before"] = int(process.memory_info().rss)
    limit = int(args.memory_limit_gb * GIB)
    state = {"phase": "building (write, count check, save)", "streamed": 0}

    def over_limit(current: int) -> None:
        # the hard stop: whatever the phase (writing, saving, building the BM25 index or the matrix), the child
        # records where it was and exits at once, before it can take the machine's memory
        result.update(
            {
                "stopped": f"RSS {current / GIB:.3f} GiB passed --memory-limit-gb {args.memory_limit_gb} "
                f"while {state['phase']} ({state['streamed']:,} of {size:,} passages streamed)",
                "stopped_after_passages": state["streamed"],
                "peak_rss_bytes": current,
            }
        )
        Path(spec["result"]).write_text(json.dumps(result, indent=2))
        persist.unlink(missing_ok=True)
        persist.with_suffix(".tmp").unlink(missing_ok=True)
        os._exit(0)

    try:
        with PeakRss(interval=0.1, limit=limit, on_limit=over_limit) as rss:
            start = time.perf_counter()
            stream = guarded(
                corpus.documents(size, with_vectors=embedding_on), start + 60 * args.max_build_minutes, state
            )
            report = handle.build(progress=True, documents=stream)
            result["build_seconds"] = round(time.perf_counter() - start, 2)
            result["passages_per_s"] = round(size / result["build_seconds"], 1)
            result["count_ok"] = report.count_ok
            result["saved_bytes"] = persist.stat().st_size
            result["rss_bytes_after_build"] = int(process.memory_info().rss)
            # the first query of each kind builds its index (bm25s over content and title; the cosine matrix)
            for method in ("bm25", "dense") if embedding_on else ("bm25",):
                state["phase"] = (
                    f"answering the first {METHOD_LABELS[method]} query (it builds the "
                    f"{'bm25s index' if method == 'bm25' else 'vector matrix'})"
                )
                start = time.perf_counter()
                handle.retrieve(questions[0], method=method, top_k=args.top_k)
                result[f"first_{method}_query_seconds"] = round(time.perf_counter() - start, 2)
            state["phase"] = "answering the timed queries"
            result["latency"] = measure_latencies(
                handle, questions, args.warmup, args.top_k, METHODS if embedding_on else ("bm25",)
            )
        result["peak_rss_bytes"] = rss.peak
        result["rss_bytes_per_passage"] = round((rss.peak - result["rss_bytes_before"]) / size, 1)
        slow = [m for m, v in result["latency"].items() if v["p99_ms"] > args.max_p99_ms]
        if result["build_seconds"] > 60 * args.max_build_minutes:
            result["stopped"] = (
                f"build took {result['build_seconds']:.0f}s, over --max-build-minutes {args.max_build_minutes}"
            )
        elif slow:
            result["stopped"] = (
                f"p99 of {', '.join(METHOD_LABELS[m] for m in slow)} over --max-p99-ms {args.max_p99_ms}"
            )
    except StopBuilding as stop:
        result.update({"stopped": stop.reason, "stopped_after_passages": stop.at, "peak_rss_bytes": rss.peak})
    finally:
        persist.unlink(missing_ok=True)
        persist.with_suffix(".tmp").unlink(missing_ok=True)
    Path(spec["result"]).write_text(json.dumps(result, indent=2))
    return 0


def run_in_memory(size: int, args, questions: list[str], query_vectors_path: Path) -> dict:
    spec_path = Path(args.tmp) / f"in-memory-{size}.spec.json"
    result_path = Path(args.tmp) / f"in-memory-{size}.result.json"
    spec = {"size": size, "args": {k: v for k, v in vars(args).items() if k != "func"}, "questions": questions,
            "query_vectors": str(query_vectors_path), "result": str(result_path)}
    spec_path.write_text(json.dumps(spec, default=str))
    print(f"\n[in-memory] {size:,} passages, in a child process (RSS limit {args.memory_limit_gb} GiB)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    completed = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--in-memory-worker", str(spec_path)], env=env, check=False
    )
    if completed.returncode != 0 or not result_path.exists():
        return {
            "store": "in_memory",
            "passages": size,
            "stopped": f"the child process failed (exit {completed.returncode}; killed for memory if negative or 137)",
        }
    result = json.loads(result_path.read_text())
    if "latency" in result:
        print(
            f"  build {result['build_seconds']:.1f}s ({result['passages_per_s']:,.0f} passages/s), saved "
            f"{result['saved_bytes'] / MIB:,.1f} MiB, "
            f"peak RSS {result['peak_rss_bytes'] / MIB:,.0f} MiB; "
            + ", ".join(
                f"{METHOD_LABELS[m]} p50 {v['p50_ms']:.1f} / p99 {v['p99_ms']:.1f} ms"
                for m, v in result["latency"].items()
            )
        )
    if result.get("stopped"):
        print(f"  STOPS here: {result['stopped']}")
    return result


# ----------------------------------------------------------------------------------------------------- main


def parse_sizes(text: str) -> list[int]:
    """``"10000,100k,1M"`` -> ``[10000, 100000, 1000000]``; each a positive whole number, strictly increasing."""
    sizes = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        multiplier = {"k": 1000, "m": 1_000_000}.get(item[-1].lower(), 1)
        number = item[:-1] if multiplier > 1 else item
        try:
            value = float(number.replace("_", "")) * multiplier
        except ValueError:
            raise ValueError(f"--sizes: {item!r} is not a number of passages (e.g. 10000, 100k, 1M)") from None
        if value < 1 or value != int(value):
            raise ValueError(f"--sizes: {item!r} must be a positive whole number of passages")
        sizes.append(int(value))
    if not sizes:
        raise ValueError("--sizes: give at least one size, e.g. --sizes 10000,100000,1000000")
    if sorted(set(sizes)) != sizes:
        raise ValueError(f"--sizes must be strictly increasing, without repeats, got {sizes}")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes", default="10000,100000,1000000", help="passage counts, increasing (k/M suffixes allowed)"
    )
    parser.add_argument(
        "--url", default=os.environ.get("ICR2_ES_URL", "http://127.0.0.1:9200"), help="the Elasticsearch node"
    )
    parser.add_argument(
        "--es-config",
        type=Path,
        default=REPO_ROOT / "indexing" / "kilt-sample-elasticsearch.yaml",
        help="index config for Elasticsearch (hosts and index are replaced by --url and <--index-prefix>-<size>)",
    )
    parser.add_argument(
        "--in-memory-config",
        type=Path,
        default=REPO_ROOT / "indexing" / "kilt-sample.yaml",
        help="index config for the in-memory store",
    )
    parser.add_argument(
        "--vector-index",
        default="default",
        choices=VECTOR_INDEX_CHOICES,
        help="dense_vector index type (default: the config's, i.e. the node's int8_hnsw); "
        "bm25_only: no vectors, BM25 only",
    )
    parser.add_argument("--hnsw-m", type=int, help="HNSW m (with --vector-index hnsw or int8_hnsw)")
    parser.add_argument(
        "--hnsw-ef-construction", type=int, help="HNSW ef_construction (with --vector-index hnsw or int8_hnsw)"
    )
    parser.add_argument(
        "--vectors-not-in-source",
        action="store_true",
        help="leave the vectors out of the stored _source (store.vectors_in_source: false): indexed for kNN only",
    )
    parser.add_argument("--batch-size", type=int, default=0, help="writer batch size (0: the config's)")
    parser.add_argument("--threads", type=int, default=0, help="bulk requests in flight (0: the config's)")
    parser.add_argument(
        "--force-merge",
        action="store_true",
        help="force-merge each Elasticsearch index to one segment (timed) before measuring disk and latency",
    )
    parser.add_argument("--index-prefix", default="icr2-scale", help="Elasticsearch indexes are named <prefix>-<size>")
    parser.add_argument(
        "--keep", action="store_true", help="keep the Elasticsearch indexes (default: deleted after each size)"
    )
    parser.add_argument(
        "--replace", action="store_true", help="delete an existing <prefix>-<size> index before loading it"
    )
    parser.add_argument("--skip-elasticsearch", action="store_true")
    parser.add_argument("--skip-in-memory", action="store_true")
    parser.add_argument("--queries", type=int, default=200, help="timed queries per method and size")
    parser.add_argument(
        "--warmup", type=int, default=20, help="untimed queries per method and size, before the timed ones"
    )
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument(
        "--seed", type=int, default=0, help="seeds the generated passages, their vectors and the choice of questions"
    )
    parser.add_argument("--real-passages", type=int, default=0, help="real sample passages to use (0: all 3,717)")
    parser.add_argument("--words", type=int, default=100, help="words per generated passage")
    parser.add_argument(
        "--vector-noise",
        type=float,
        default=0.75,
        help="norm of the noise added to a real vector for a generated passage",
    )
    parser.add_argument(
        "--memory-limit-gb",
        type=float,
        default=8.0,
        help="the in-memory store stops when its process's RSS passes this",
    )
    parser.add_argument(
        "--max-build-minutes", type=float, default=60.0, help="the in-memory store stops when a build takes longer"
    )
    parser.add_argument(
        "--max-p99-ms",
        type=float,
        default=1000.0,
        help="the in-memory store stops when a method's p99 latency passes this",
    )
    parser.add_argument(
        "--target", type=int, default=KILT_FULL_PASSAGES, help="passages to project to (default: full KILT, 36M)"
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "scale")
    parser.add_argument("--in-memory-worker", type=Path, help=argparse.SUPPRESS)
    return parser


def validate(parser: argparse.ArgumentParser, args) -> None:
    try:
        args.sizes_list = parse_sizes(args.sizes)
    except ValueError as error:
        parser.error(str(error))
    for name in ("queries", "top_k", "words"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    for name in ("warmup", "real_passages", "batch_size", "threads"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}.")
    if args.words < 2:
        parser.error("--words must be >= 2 (generated passages are made of bigrams).")
    if not args.vector_noise >= 0:
        parser.error(f"--vector-noise must be >= 0, got {args.vector_noise}.")
    for name in ("memory_limit_gb", "max_build_minutes", "max_p99_ms"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}.")
    if (args.hnsw_m is not None or args.hnsw_ef_construction is not None) and args.vector_index not in (
        "hnsw",
        "int8_hnsw",
    ):
        parser.error(
            f"--hnsw-m / --hnsw-ef-construction apply to --vector-index hnsw or int8_hnsw, not {args.vector_index}."
        )
    if args.skip_elasticsearch and args.skip_in_memory:
        parser.error("--skip-elasticsearch and --skip-in-memory together leave nothing to measure.")
    if args.target < args.sizes_list[-1]:
        parser.error(f"--target ({args.target}) must be at least the largest size ({args.sizes_list[-1]}).")
    import re

    if not re.fullmatch(r"[a-z0-9][a-z0-9_\-]*", args.index_prefix):
        parser.error(f"--index-prefix must be a lower-case Elasticsearch index name prefix, got {args.index_prefix!r}.")
    for path in (args.es_config, args.in_memory_config):
        if not path.exists():
            parser.error(f"index config {path} not found.")
    if not args.skip_elasticsearch:
        # the config the first size will load, checked now (e.g. an HNSW m out of range), as one line
        args.tmp = tempfile.gettempdir()
        try:
            es_config_for(args, args.sizes_list[0], args.vector_index != "bm25_only")
        except Exception as error:  # ConfigError and friends, reported as a usage error
            parser.error(f"--es-config {args.es_config} with these options: {error}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.in_memory_worker is not None:
        return in_memory_worker(args.in_memory_worker)
    validate(parser, args)
    sizes = args.sizes_list
    env = machine_info()
    started = datetime.now(UTC)

    client, node = None, None
    if not args.skip_elasticsearch:
        from icr2_components.stores.elasticsearch.store import build_elasticsearch_client

        client = build_elasticsearch_client(args.url, request_timeout=600)
        try:
            node = es_node(client)
        except Exception as error:  # one clear line instead of a transport traceback
            print(
                f"No Elasticsearch at {args.url} ({type(error).__name__}); start one with `bash "
                "scripts/elasticsearch.sh start`, "
                "pass --url, or --skip-elasticsearch.",
                file=sys.stderr,
            )
            return 1
        print(f"Elasticsearch {node['version']} at {args.url} (pid {node['pid']}, "
              f"{'RSS read with psutil' if node['rss_readable'] else 'not on this machine: no node RSS'})")
    print(f"{env['cpus']} CPUs, {env['memory_gib']} GiB, load average {env['load_average_at_start']}; sizes {sizes}")

    corpus = build_corpus(args)
    embedding_on = corpus.vectors is not None
    generation_us = generation_cost(corpus, 2000, embedding_on)
    seed_cosine = mean_seed_cosine(corpus.vectors) if embedding_on else None
    note = (
        f"{len(corpus.real):,} real sample passages (real all-MiniLM-L6-v2 vectors), then generated passages (id "
        "prefix "
        f"'{GENERATED_PREFIX}', meta generated: true): {args.words} words as random bigrams of the real passages, seed "
        f"{args.seed}"
        + (
            f"; their vectors are NOT computed but drawn around real ones (noise {args.vector_noise}, mean cosine to "
            "the seed "
            f"vector {seed_cosine:.3f})"
            if embedding_on
            else "; no vectors (bm25_only)"
        )
        + ". Cost figures only: no quality figure may be taken from generated passages."
    )
    print(note)
    print(
        f"generating a passage costs {generation_us:.0f} us (text{' and vector' if embedding_on else ''}), inside the "
        "indexing times below"
    )

    questions = load_questions(args.queries + args.warmup, args.seed)
    query_seconds = None
    query_vectors_matrix = None
    if embedding_on:
        from icr2_components.stores.embedding import PassageEmbedder

        embedder = PassageEmbedder("all-minilm-l6-v2", meta_fields=[], device="cpu")
        embedder.embed_query(questions[0])
        times = []
        rows = []
        for question in questions:
            start = time.perf_counter()
            rows.append(embedder.embed_query(question))
            times.append(1000 * (time.perf_counter() - start))
        query_vectors_matrix = np.asarray(rows, dtype=np.float32)
        query_seconds = percentiles(times)
        print(
            f"query embedding (MiniLM, CPU, not in the latencies below): p50 {query_seconds['p50_ms']:.1f} ms, p99 "
            f"{query_seconds['p99_ms']:.1f} ms"
        )
    query_vectors = (
        {q: v.tolist() for q, v in zip(questions, query_vectors_matrix, strict=True)} if embedding_on else {}
    )

    es_runs: list[dict] = []
    mem_runs: list[dict] = []
    stop_note = "not measured (--skip-in-memory)" if args.skip_in_memory else "did not stop within the sizes measured"
    with tempfile.TemporaryDirectory(prefix="icr2-scale-") as tmp:
        args.tmp = tmp
        vectors_path = Path(tmp) / "query-vectors.npy"
        np.save(vectors_path, query_vectors_matrix if embedding_on else np.zeros((len(questions), 1), dtype=np.float32))
        if client is not None:
            for size in sizes:
                es_runs.append(run_elasticsearch(size, corpus, args, client, node, questions, query_vectors))
        if not args.skip_in_memory:
            limit = args.memory_limit_gb * GIB
            for i, size in enumerate(sizes):
                measured = [r for r in mem_runs if "latency" in r]
                if measured:
                    fit = linear_fit(
                        [0] + [r["passages"] for r in measured],
                        [measured[0]["rss_bytes_before"]] + [r["peak_rss_bytes"] for r in measured],
                    )
                    expected = evaluate(fit, size)
                    if expected > limit:
                        points = ", ".join(f"{r['passages']:,}" for r in measured)
                        stop_note = (
                            f"stops before {size:,} passages: its RSS there, projected linearly from "
                            f"{points}, is {human_bytes(expected)}, over the "
                            f"--memory-limit-gb {args.memory_limit_gb} (largest size under the limit by the same line: "
                            f"{max(0, (limit - fit['a']) / fit['b']):,.0f} passages); not tried"
                        )
                        mem_runs.append(
                            {
                                "store": "in_memory",
                                "passages": size,
                                "stopped": f"not tried: projected RSS {human_bytes(expected)} over the limit",
                            }
                        )
                        print(f"\n[in-memory] {stop_note}")
                        break
                result = run_in_memory(size, args, questions, vectors_path)
                mem_runs.append(result)
                if result.get("stopped"):
                    stop_note = f"stops at {size:,} passages: {result['stopped']}"
                    if i + 1 < len(sizes):
                        larger = ", ".join(f"{s:,}" for s in sizes[i + 1:])
                        stop_note += f"; larger sizes ({larger}) not tried"
                    break

    env["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    projection = {
        "target_passages": args.target,
        "note": (
            f"Extrapolated from at most {sizes[-1]:,} passages on one node and one machine: disk, RSS and indexing "
            "time "
            "by a least-squares line a + b*n over the measured sizes, latency by a power law c*n^k (a line in log-log) "
            "and, as a bracket, by a line (*_linear); a negative k means the latency did not grow measurably over the "
            "sizes measured. The in-memory figures at the target only say how far beyond its stop that would be. "
            "HNSW graph building and merging grow faster than linearly, so the indexing hours are a lower bound; a "
            "single "
            "node with this heap may not hold 36M passages at all (see `icr2 index --plan`)."
        ),
        "elasticsearch": projections(es_runs, args.target, "elasticsearch"),
        "in_memory": projections(mem_runs, args.target, "in_memory"),
    }
    payload = {
        "command": " ".join(["python", "bench/scale.py", *(argv if argv is not None else sys.argv[1:])]),
        "measured_at": started.isoformat(timespec="seconds"),
        "machine": env,
        "elasticsearch_node": node,
        "corpus": {
            "real_passages": len(corpus.real),
            "generated_id_prefix": GENERATED_PREFIX,
            "words_per_generated_passage": args.words,
            "seed": args.seed,
            "vector_noise": args.vector_noise if embedding_on else None,
            "mean_cosine_to_seed_vector": seed_cosine,
            "generation_us_per_passage": round(generation_us, 1),
            "note": note,
        },
        "queries": {
            "count": args.queries,
            "warmup": args.warmup,
            "top_k": args.top_k,
            "source": "NQ sample questions (seeded choice)",
            "query_embedding_ms": query_seconds,
        },
        "limits": {
            "memory_limit_gb": args.memory_limit_gb,
            "max_build_minutes": args.max_build_minutes,
            "max_p99_ms": args.max_p99_ms,
        },
        "elasticsearch": es_runs,
        "in_memory": mem_runs,
        "in_memory_stop": stop_note,
        "baseline_ratios": {
            "elasticsearch": baseline_ratios(es_runs, "elasticsearch"),
            "in_memory": baseline_ratios(mem_runs, "in_memory"),
        },
        "projection": projection,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(payload, indent=2) + "\n")
    (args.out / "scale.md").write_text(markdown(payload))
    plot(payload, args.out / "scale.png")
    print_summary(payload)
    print(f"\nwrote {args.out / 'scale.json'}, {args.out / 'scale.md'} and {args.out / 'scale.png'}")
    if env["load_average_at_start"][0] > 0.5 * (env["cpus"] or 1):
        print(
            f"load average {env['load_average_at_start'][0]} at start on {env['cpus']} CPUs: these figures are not the "
            "machine's; re-measure on idle cores."
        )
    return 0


def print_summary(payload: dict) -> None:
    print()
    for store, rows in payload["baseline_ratios"].items():
        if not rows:
            continue
        print(f"{store}: each size against the smallest of this run ({rows[0]['passages']:,} passages)")
        keys = [k for k in rows[0] if k != "passages"]
        print(f"  {'passages':>10} " + " ".join(f"{k:>18}" for k in keys))
        for row in rows:
            print(f"  {row['passages']:>10,} " + " ".join(f"{row[k]:>18}" for k in keys))
    print(f"\nin-memory store: {payload['in_memory_stop']}")
    target = payload["projection"]["target_passages"]
    print(f"\nprojection to {target:,} passages ({payload['projection']['note']})")
    for store in ("elasticsearch", "in_memory"):
        for name, fit in payload["projection"][store].items():
            points = ", ".join(f"{int(s):,}: {format_cost(name, v)}" for s, v in fit["points"])
            form = (
                f"{fit['a']:.4g} + {fit['b']:.4g} n"
                if fit["form"] == "a + b * n"
                else f"{fit['c']:.4g} n^{fit['k']:.3f}"
            )
            print(
                f"  {store:<13} {name:<24} {format_cost(name, fit['at_target']):>14}   fit {form}   (measured {points})"
            )


if __name__ == "__main__":
    sys.exit(main())
