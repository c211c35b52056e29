"""Passages per second into Elasticsearch: our streaming writer against ElasticsearchDocumentStore.write_documents.

    bash scripts/elasticsearch.sh start
    .venv/bin/python bench/indexing.py [--times 10] [--embedding-times 1] [--out bench/results/indexing.json]

Same passages, same run, same node (ICR2_ES_URL, default http://127.0.0.1:9200):

- the bundled sample's passages streamed ``--times`` times (each copy with its own ids, ``<id>-x<k>``), without
  embeddings;
- the sample with precomputed all-MiniLM-L6-v2 embeddings (384 floats, computed once and cached), streamed
  ``--embedding-times`` times.

Each is written into a fresh index by
  ours:  ElasticsearchStreamingWriter.write(stream) (checkpointing on, final refresh and count check included);
  plain: ElasticsearchDocumentStore.write_documents(batch, policy=OVERWRITE) for each batch of ``--batch-size``
         documents of the same stream, the library's defaults otherwise (refresh="wait_for"), the way an
         indexing pipeline's DocumentWriter calls it;
  plain, refresh=False (informative): the same calls with refresh=False.
The ratio printed is ours / plain. The memory part records the process RSS at 10%, 25%, 50%, 75% and 100% of
our writer's pass over the largest stream, and the peak RSS sampled every 50 ms during that pass.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import psutil  # noqa: E402
from haystack import Document  # noqa: E402
from haystack.document_stores.types import DuplicatePolicy  # noqa: E402
from tqdm import tqdm  # noqa: E402

from icr2_components.kilt import KiltKnowledgeSource, build_sample  # noqa: E402
from icr2_components.models.resolver import cache_dir  # noqa: E402
from icr2_components.stores.elasticsearch_store import build_elasticsearch_client  # noqa: E402
from icr2_components.stores.elasticsearch_writer import ElasticsearchStreamingWriter  # noqa: E402

MIB = 1024 * 1024
CHECKPOINTS = (0.10, 0.25, 0.50, 0.75, 1.00)


def replicated(corpus: Path, times: int, embeddings: dict[str, list[float]] | None = None) -> Callable[[], Iterator[Document]]:
    """A factory of the sample's passages ``times`` over, each copy with its own ids (copy 0 keeps the real ids)."""

    def stream() -> Iterator[Document]:
        for copy in range(times):
            for document in KiltKnowledgeSource(corpus).documents():
                embedding = embeddings[document.id] if embeddings is not None else None
                yield replace(document, id=document.id if copy == 0 else f"{document.id}-x{copy}", embedding=embedding)

    return stream


def precomputed_embeddings(corpus: Path) -> dict[str, list[float]]:
    """all-MiniLM-L6-v2 embeddings of the sample's passages, computed once and cached as .npy."""
    import numpy as np

    documents = list(KiltKnowledgeSource(corpus).documents())
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
    return {d.id: row.tolist() for d, row in zip(documents, matrix)}


def progress(stream: Iterable[Document], total: int, desc: str, on_item: Callable[[int], None] | None = None) -> Iterator[Document]:
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

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


def run_ours(url: str, stream: Callable[[], Iterator[Document]], total: int, args, label: str, measure_memory: bool = False) -> dict:
    index = f"bench-ours-{uuid.uuid4().hex[:8]}"
    client = build_elasticsearch_client(url)
    rss: dict[str, float] = {}
    marks = {max(1, int(total * f)): f for f in CHECKPOINTS}
    process = psutil.Process()

    def on_item(i: int) -> None:
        if measure_memory and i in marks:
            rss[f"{int(marks[i] * 100)}%"] = round(process.memory_info().rss / MIB, 1)

    with tempfile.TemporaryDirectory() as tmp:
        writer = ElasticsearchStreamingWriter(
            url,
            index,
            batch_size=args.batch_size,
            thread_count=args.threads,
            checkpoint_path=Path(tmp) / "checkpoint.json",
            fingerprint=label,
            progress=False,
        )
        rss_before = process.memory_info().rss / MIB
        try:
            with RssSampler() as sampler:
                start = time.perf_counter()
                report = writer.write(progress(stream(), total, f"ours   {label}", on_item))
                seconds = time.perf_counter() - start
        finally:
            client.indices.delete(index=index, ignore_unavailable=True)
    assert report.count_ok and report.index_count == total, report.summary()
    result = {"method": "ours", "stream": label, "passages": total, "seconds": round(seconds, 2), "passages_per_second": round(total / seconds, 1)}
    if measure_memory:
        result["rss_mib_before"] = round(rss_before, 1)
        result["rss_mib_at"] = rss
        result["peak_rss_mib_during"] = round(sampler.peak / MIB, 1)
    return result


def run_plain(url: str, stream: Callable[[], Iterator[Document]], total: int, args, label: str, refresh="wait_for") -> dict:
    index = f"bench-plain-{uuid.uuid4().hex[:8]}"
    # the library's own store, as a user would create it: default mapping, default settings
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore

    store = ElasticsearchDocumentStore(hosts=url, index=index)
    name = "plain" if refresh == "wait_for" else "plain_refresh_false"
    try:
        start = time.perf_counter()
        batch: list[Document] = []
        for document in progress(stream(), total, f"{name:<6} {label}"):
            batch.append(document)
            if len(batch) >= args.batch_size:
                store.write_documents(batch, policy=DuplicatePolicy.OVERWRITE, refresh=refresh)
                batch = []
        if batch:
            store.write_documents(batch, policy=DuplicatePolicy.OVERWRITE, refresh=refresh)
        store.client.indices.refresh(index=index)
        count = store.count_documents()
        seconds = time.perf_counter() - start
    finally:
        store.client.indices.delete(index=index, ignore_unavailable=True)
    assert count == total, (count, total)
    return {"method": name, "stream": label, "passages": total, "seconds": round(seconds, 2), "passages_per_second": round(total / seconds, 1)}


def machine() -> dict:
    memory = psutil.virtual_memory()
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(memory.total / 1024**3, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("ICR2_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--times", type=int, default=10, help="copies of the sample in the stream without embeddings (default 10)")
    parser.add_argument("--embedding-times", type=int, default=1, help="copies of the sample in the stream with embeddings (0: skip)")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--threads", type=int, default=2, help="our writer's bulk requests in flight")
    parser.add_argument("--no-refresh-false", action="store_true", help="skip the informative plain refresh=False run")
    parser.add_argument("--out", default="bench/results/indexing.json")
    args = parser.parse_args(argv)

    client = build_elasticsearch_client(args.url)
    try:
        info = client.info().body
    except Exception as error:  # noqa: BLE001
        print(f"No Elasticsearch at {args.url} ({error}); start one with `bash scripts/elasticsearch.sh start`.", file=sys.stderr)
        return 1
    corpus = build_sample().corpus
    per_copy = sum(1 for _ in KiltKnowledgeSource(corpus).passages())
    results: list[dict] = []
    env = machine()
    env["elasticsearch"] = info["version"]["number"]
    print(f"Elasticsearch {env['elasticsearch']} at {args.url}; {env['cpus']} CPUs, {env['memory_gib']} GiB; load average {env['load_average_at_start']}")

    # 1. without embeddings, `times` copies; ours first in a fresh process, so its RSS figures are its own
    label = f"sample x{args.times}, no embeddings"
    stream, total = replicated(corpus, args.times), per_copy * args.times
    results.append(run_ours(args.url, stream, total, args, label, measure_memory=True))
    results.append(run_plain(args.url, stream, total, args, label))
    if not args.no_refresh_false:
        results.append(run_plain(args.url, stream, total, args, label, refresh=False))

    # 2. with precomputed embeddings
    if args.embedding_times > 0:
        embeddings = precomputed_embeddings(corpus)
        label_e = f"sample x{args.embedding_times}, 384-d embeddings"
        stream_e, total_e = replicated(corpus, args.embedding_times, embeddings), per_copy * args.embedding_times
        results.append(run_ours(args.url, stream_e, total_e, args, label_e))
        results.append(run_plain(args.url, stream_e, total_e, args, label_e))
        if not args.no_refresh_false:
            results.append(run_plain(args.url, stream_e, total_e, args, label_e, refresh=False))

    ratios = {}
    for result in results:
        if result["method"] == "ours":
            plain = next(r for r in results if r["stream"] == result["stream"] and r["method"] == "plain")
            ratios[result["stream"]] = round(result["passages_per_second"] / plain["passages_per_second"], 2)
    env["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    env["peak_rss_mib_process"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    print()
    print(f"{'stream':<36} {'method':<22} {'passages':>9} {'seconds':>9} {'passages/s':>11}")
    for r in results:
        print(f"{r['stream']:<36} {r['method']:<22} {r['passages']:>9} {r['seconds']:>9.1f} {r['passages_per_second']:>11.1f}")
    print()
    for stream_label, ratio in ratios.items():
        verdict = "meets" if ratio >= 3 else "BELOW"
        print(f"ratio ours / plain write_documents, {stream_label}: {ratio:.2f}x ({verdict} the 3x target)")
    memory = results[0]
    print(
        f"RSS of our writer over {memory['passages']} passages: before {memory['rss_mib_before']} MiB, "
        + ", ".join(f"{k} {v} MiB" for k, v in memory["rss_mib_at"].items())
        + f"; peak during the pass {memory['peak_rss_mib_during']} MiB"
    )

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "machine": env, "results": results, "ratios": ratios, "batch_size": args.batch_size, "threads": args.threads}
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
