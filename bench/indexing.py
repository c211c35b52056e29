"""Passages per second into Elasticsearch: our streaming writer against ElasticsearchDocumentStore.write_documents.

    bash scripts/elasticsearch.sh start
    .venv/bin/python bench/indexing.py [--times 10] [--embedding-times 2] [--rounds 3] [--out bench/results/indexing.json]
    .venv/bin/python bench/indexing.py --resume-only [--resume-passages 2000] [--resume-out bench/results/indexing_resume.json]

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
Each measurement is repeated ``--rounds`` times, the methods' order rotating from round to round, and the
medians are reported: passages per wall-clock second (the target: ours / plain >= 3x) and passages per CPU
second (this process plus the node's own CPU time from its node stats), which other work on a shared machine
disturbs much less. The memory part records the process RSS at 10%, 25%, 50%, 75% and 100% of our writer's
first pass over the stream without embeddings, and the peak RSS sampled every 50 ms during that pass.

Resuming an interrupted load with embeddings on (``--resume-passages`` N, 0: skip; ``--resume-only``: only this):
the first N passages of the sample, embedded with all-minilm-l6-v2 (warmed up before any timing), in ``--resume-batch-size``
chunks checkpointed after every chunk. For each method, in a fresh index:
  first half: the writer gets the first N/2 passages (``prepare=embed_stream``) and is stopped right after its
              checkpoint confirms passage N/2, before its final count check (as if the process were killed there);
  resume:     a new writer, same checkpoint, gets the whole N-passage stream:
    new (prepare): ``write(raw, prepare=embed_stream)``: the confirmed prefix is skipped on the raw stream, then embedded;
    old (wrapped): ``write(embed_stream(raw))``: the embedder wraps the stream before the writer skips, so the
                   skipped prefix is embedded again (the behaviour before the fix; the baseline).
The skip time is from the start of the resume's ``write`` call (checkpoint read and index check included) until
the writer asks for its first document past the confirmed prefix; the target is skip (new) / first half < 5%.
Every resume must end with the index holding exactly N documents, all with an embedding (count_ok). Results go to
``--resume-out`` (JSON) and the same name with .png.
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
from icr2_components.paths import cache_dir  # noqa: E402
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


class Meter:
    """Wall time, the client's CPU time (this process, all threads) and the node's CPU time (from its own
    node stats) over a block. CPU seconds are much less sensitive than wall time to other work on the machine."""

    def __init__(self, client) -> None:
        self.client = client

    def _es_cpu(self) -> float:
        stats = self.client.nodes.stats(node_id="_local", metric="process").body
        return next(iter(stats["nodes"].values()))["process"]["cpu"]["total_in_millis"] / 1000

    def __enter__(self) -> "Meter":
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
            with RssSampler() as sampler, Meter(client) as meter:
                report = writer.write(progress(stream(), total, f"ours   {label}", on_item))
        finally:
            client.indices.delete(index=index, ignore_unavailable=True)
    assert report.count_ok and report.index_count == total, report.summary()
    result = meter.result("ours", label, total)
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
        with Meter(store.client) as meter:
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
    finally:
        store.client.indices.delete(index=index, ignore_unavailable=True)
    assert count == total, (count, total)
    return meter.result(name, label, total)


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

    options = {"batch_size": args.resume_batch_size, "thread_count": args.threads, "checkpoint_every": 1, "fingerprint": fingerprint}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "checkpoint.json"
        try:
            first = InterruptedWriter(url, index, checkpoint_path=checkpoint, progress=False, stop_at=half, **options)
            with Meter(client) as first_meter:
                try:
                    first.write(progress(raw(half), half, f"first half ({method})"), prepare=embedder.embed_stream)
                except Interrupted:
                    pass
            assert first.fired, "the first half ended without reaching its checkpoint"
            saved = json.loads(checkpoint.read_text())
            assert saved["position"] == half and not saved.get("completed"), saved

            writer = ElasticsearchStreamingWriter(url, index, checkpoint_path=checkpoint, progress=True, **options)
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
                clock = RequestClock(embedder.embed_stream(progress(raw(total), total, "resume, embed then skip (old)")), half + 1)
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
        "count_ok": bool(report.count_ok and report.resumed_from == half and report.index_count == total == len(set(ids)) and with_embedding == total),
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
    print(f"resume: the first {total} of the sample's {available} passages, embeddings on ({embedder.model}, dim {embedder.dimension}), "
          f"batch {args.resume_batch_size}, checkpoint after every batch, {args.resume_rounds} round(s)")

    methods = ["new", "old"]
    runs = []
    for round_index in range(args.resume_rounds):
        order = methods[round_index % 2 :] + methods[: round_index % 2]
        for method in order:
            result = resume_once(url, corpus, total, embedder, args, method)
            result["round"] = round_index + 1
            runs.append(result)
            print(
                f"  round {round_index + 1}: {method}: first half {result['first_half_seconds']:.1f}s, skip {result['skip_seconds']:.3f}s, "
                f"whole resume {result['resume_seconds']:.1f}s, index holds {result['index_count']} (count_ok {result['count_ok']}; load {result['load_average_1min']})"
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
    print(f"  skip the confirmed prefix, new (skip, then embed): {summary['skip_seconds_new']:>8.3f} s  "
          f"= {100 * summary['skip_over_first_half_new']:.2f}% of the first half ({'meets' if summary['meets_5_percent'] else 'MISSES'} the < 5% target)")
    print(f"  skip the confirmed prefix, old (embed, then skip): {summary['skip_seconds_old']:>8.2f} s  "
          f"= {100 * summary['skip_over_first_half_old']:.1f}% of the first half; old / new {summary['skip_old_over_new']}x")
    print(f"  whole resume: new {summary['resume_seconds_new']:.1f} s, old {summary['resume_seconds_old']:.1f} s")
    print(f"  count check: index holds {total} documents, all embedded, resumed from {total // 2}: {'ok' if summary['count_ok'] else 'FAILED'}")

    out = Path(args.resume_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "machine": env, "summary": summary, "runs": runs}
    out.write_text(json.dumps(payload, indent=2) + "\n")
    plot_resume(summary, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0 if summary["count_ok"] else 1


def plot_resume(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"first half\n({summary['first_half_passages']} embedded)", "skip prefix\nnew: skip, then embed", "skip prefix\nold: embed, then skip",
              "whole resume\nnew", "whole resume\nold"]
    values = [summary["first_half_seconds"], summary["skip_seconds_new"], summary["skip_seconds_old"], summary["resume_seconds_new"], summary["resume_seconds_old"]]
    colors = ["grey", "tab:green", "tab:red", "tab:green", "tab:red"]
    figure, axis = plt.subplots(figsize=(8, 3.8))
    bars = axis.bar(range(len(values)), values, color=colors)
    for bar, value in zip(bars, values):
        axis.annotate(f"{value:.2f} s" if value < 10 else f"{value:.1f} s", (bar.get_x() + bar.get_width() / 2, value), ha="center", va="bottom", fontsize=8)
    axis.axhline(0.05 * summary["first_half_seconds"], color="black", linestyle="--", linewidth=0.8, label="5% of the first half (target for the skip)")
    axis.set_xticks(range(len(values)), labels, fontsize=8)
    axis.set_ylabel("seconds")
    axis.set_title(f"Resume after {summary['first_half_passages']} of {summary['passages']} passages, MiniLM embeddings on")
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


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("ICR2_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--times", type=int, default=10, help="copies of the sample in the stream without embeddings (default 10)")
    parser.add_argument("--embedding-times", type=int, default=2, help="copies of the sample in the stream with embeddings (0: skip)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the methods' order rotates from round to round, medians reported")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--threads", type=int, default=2, help="our writer's bulk requests in flight")
    parser.add_argument("--no-refresh-false", action="store_true", help="skip the informative plain refresh=False runs")
    parser.add_argument("--out", default="bench/results/indexing.json")
    parser.add_argument("--resume-passages", type=int, default=2000, help="passages of the resume measurement, embeddings on (0: skip it)")
    parser.add_argument("--resume-batch-size", type=int, default=100, help="chunk size of the resume measurement (checkpoint after each)")
    parser.add_argument("--resume-rounds", type=int, default=1, help="rounds of the resume measurement (new/old order rotating)")
    parser.add_argument("--resume-only", action="store_true", help="only the resume measurement")
    parser.add_argument("--resume-out", default="bench/results/indexing_resume.json")
    args = parser.parse_args(argv)

    client = build_elasticsearch_client(args.url)
    try:
        info = client.info().body
    except Exception as error:  # noqa: BLE001
        print(f"No Elasticsearch at {args.url} ({error}); start one with `bash scripts/elasticsearch.sh start`.", file=sys.stderr)
        return 1
    corpus = build_sample().corpus
    per_copy = sum(1 for _ in KiltKnowledgeSource(corpus).passages())
    env = machine()
    env["elasticsearch"] = info["version"]["number"]
    print(f"Elasticsearch {env['elasticsearch']} at {args.url}; {env['cpus']} CPUs, {env['memory_gib']} GiB; load average {env['load_average_at_start']}")
    if args.resume_only:
        return run_resume(args.url, corpus, env, args)

    streams = [(f"sample x{args.times}, no embeddings", replicated(corpus, args.times), per_copy * args.times)]
    if args.embedding_times > 0:
        embeddings = precomputed_embeddings(corpus)
        streams.append((f"sample x{args.embedding_times}, 384-d embeddings", replicated(corpus, args.embedding_times, embeddings), per_copy * args.embedding_times))
    methods = ["ours", "plain"] + ([] if args.no_refresh_false else ["plain_refresh_false"])

    runs: list[dict] = []
    memory: dict | None = None
    for round_index in range(args.rounds):
        order = methods[round_index % len(methods) :] + methods[: round_index % len(methods)]
        for label, stream, total in streams:
            for method in order:
                if method == "ours":
                    # the first pass of ours over the largest stream also records the RSS
                    result = run_ours(args.url, stream, total, args, label, measure_memory=memory is None)
                    if memory is None:
                        memory = result
                else:
                    result = run_plain(args.url, stream, total, args, label, refresh="wait_for" if method == "plain" else False)
                result["round"] = round_index + 1
                runs.append(result)
                print(f"  round {round_index + 1}: {method:<20} {label:<32} {result['passages_per_second']:>8.1f} passages/s (load {result['load_average_1min']})")

    summary = []
    for label, _, total in streams:
        for method in methods:
            mine = [r for r in runs if r["stream"] == label and r["method"] == method]
            summary.append(
                {
                    "stream": label,
                    "method": method,
                    "passages": total,
                    "runs": len(mine),
                    "median_passages_per_second": round(median([r["passages_per_second"] for r in mine]), 1),
                    "median_passages_per_cpu_second": round(median([r["passages_per_cpu_second"] for r in mine]), 1),
                    "median_seconds": round(median([r["seconds"] for r in mine]), 2),
                }
            )
    ratios = {}
    for label, _, _ in streams:
        ours = next(s for s in summary if s["stream"] == label and s["method"] == "ours")
        plain = next(s for s in summary if s["stream"] == label and s["method"] == "plain")
        ratios[label] = {
            "passages_per_second": round(ours["median_passages_per_second"] / plain["median_passages_per_second"], 2),
            "passages_per_cpu_second": round(ours["median_passages_per_cpu_second"] / plain["median_passages_per_cpu_second"], 2),
            "per_round": [
                round(o["passages_per_second"] / p["passages_per_second"], 2)
                for o, p in zip(
                    [r for r in runs if r["stream"] == label and r["method"] == "ours"],
                    [r for r in runs if r["stream"] == label and r["method"] == "plain"],
                )
            ],
        }
    env["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    env["peak_rss_mib_process"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    print()
    print(f"medians over {args.rounds} round(s), batch size {args.batch_size}, our writer with {args.threads} requests in flight")
    print(f"{'stream':<34} {'method':<20} {'passages':>9} {'seconds':>9} {'passages/s':>11} {'passages/CPU-s':>15}")
    for s in summary:
        print(
            f"{s['stream']:<34} {s['method']:<20} {s['passages']:>9} {s['median_seconds']:>9.1f} "
            f"{s['median_passages_per_second']:>11.1f} {s['median_passages_per_cpu_second']:>15.1f}"
        )
    print()
    for label, ratio in ratios.items():
        verdict = "meets" if ratio["passages_per_second"] >= 3 else "BELOW"
        print(
            f"ratio ours / plain write_documents, {label}: {ratio['passages_per_second']:.2f}x passages/s ({verdict} the 3x target; "
            f"per round {ratio['per_round']}), {ratio['passages_per_cpu_second']:.2f}x passages per CPU-second"
        )
    assert memory is not None
    print(
        f"RSS of our writer over {memory['passages']} passages: before {memory['rss_mib_before']} MiB, "
        + ", ".join(f"{k} {v} MiB" for k, v in memory["rss_mib_at"].items())
        + f"; peak during the pass {memory['peak_rss_mib_during']} MiB"
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
        "ratios": ratios,
        "memory": {k: memory[k] for k in ("stream", "passages", "rss_mib_before", "rss_mib_at", "peak_rss_mib_during")},
        "runs": runs,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {out}")
    if args.resume_passages > 0:
        print()
        return run_resume(args.url, corpus, env, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
