"""Measure, on this machine and its Elasticsearch node, the figures `icr2 index --plan` projects from.

For each index type (BM25 only, hnsw, int8_hnsw, flat, int8_flat) the bundled sample's passages, with the
embeddings the embedded sample index already holds (all-MiniLM-L6-v2, 384 dims), are written with the project's
streaming writer into a fresh index at two sizes; then:

- indexing passages/s: the larger size's passages over the writer's wall time (bulk, refresh, count check), and
  each type's ratio to BM25-only in the same run (the baseline);
- disk bytes per passage: the slope of the force-merged primary store size between the two sizes (so the fixed
  cost of an empty index does not count);
- embedding passages/s: PassageEmbedder (the writer's embedder) on CPU over the first --embed-passages passages.

The machine, the node (version, heap, RAM, disk), the load average before and after, and the date are written
with the figures (``indexing/measured-figures.yaml``). Figures taken while other work uses the cores are not
the machine's: take the ones you publish on idle cores.

    python bench/index_plan_figures.py --out indexing/measured-figures.yaml            # sizes 1000, 3000
    python bench/index_plan_figures.py --sizes 2000,10000 --embed-passages 1000 ...    # bigger (capped at the sample)
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import platform
import sys
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import yaml  # noqa: E402

from icr2_components.stores.elasticsearch.index_layout import IndexLayout, VectorIndexSettings  # noqa: E402
from icr2_components.stores.elasticsearch.index_plan import INDEX_TYPES  # noqa: E402


def machine_info() -> dict:
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    return {"hostname": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "cpu_model": cpu_model, "cpu_count": os.cpu_count(), "memory_bytes": memory}


def node_info(client, url: str) -> dict:
    info = client.info().body
    stats = next(iter(client.nodes.stats(metric="os,jvm,fs").body["nodes"].values()))
    return {"url": url, "version": info["version"]["number"],
            "memory_bytes": int(stats["os"]["mem"]["total_in_bytes"]),
            "heap_max_bytes": int(stats["jvm"]["mem"]["heap_max_in_bytes"]),
            "disk_total_bytes": int(stats["fs"]["total"]["total_in_bytes"]),
            "disk_available_bytes": int(stats["fs"]["total"]["available_in_bytes"])}


# the extra measurement of the vectors left out of _source (store.vectors_in_source: false), on the node default type
LEAN = "int8_hnsw_vectors_not_in_source"
# longer than Elasticsearch's retention-lease sync interval (30 s), see measure_type
LEASE_SYNC_WAIT_S = 35


def layout_for(index_type: str, shards: int) -> IndexLayout:
    if index_type == "bm25_only":
        return IndexLayout(shards=shards, vectors=False)
    if index_type == LEAN:
        return IndexLayout(shards=shards, vector_index=VectorIndexSettings(type="int8_hnsw"), vectors_in_source=False)
    return IndexLayout(shards=shards, vector_index=VectorIndexSettings(type=index_type))


def measure_type(client, url: str, documents: list, index_type: str, size: int, prefix: str, args) -> dict:
    from icr2_components.stores.elasticsearch.writer import (
        ElasticsearchStreamingWriter,
        StreamingWriterSettings,
        document_to_source,
    )

    index = f"{prefix}-{index_type.replace('_', '-')}-{size}-{uuid.uuid4().hex[:6]}"
    stream = documents[:size] if index_type != "bm25_only" else [replace(d, embedding=None) for d in documents[:size]]
    writer = ElasticsearchStreamingWriter(
        url,
        index,
        StreamingWriterSettings(
            batch_size=args.batch_size,
            thread_count=args.threads,
            checkpoint_path=None,
            layout=layout_for(index_type, args.shards),
            progress=False,
        ),
    )
    try:
        started = time.perf_counter()
        report = writer.write(stream)
        seconds = time.perf_counter() - started
        if not report.count_ok:
            raise RuntimeError(f"{index}: the count check failed ({report.as_dict()})")
        if index_type == LEAN:
            # Excluded vectors stay in Lucene's _recovery_source until a merge after the peer-recovery retention lease
            # has moved past them (synced every 30 s: index.soft_deletes.retention_lease.sync_interval); a large load
            # passes that while it runs, a 3-second one does not. So: flush, wait for a sync, re-index one passage
            # so that the merge below rewrites the segment, as merges during a real load do.
            client.indices.flush(index=index)
            time.sleep(LEASE_SYNC_WAIT_S)
            first = stream[0]
            client.index(index=index, id=first.id, document=document_to_source(first), refresh=True)
        client.options(request_timeout=600).indices.forcemerge(
            index=index, max_num_segments=1, wait_for_completion=True
        )
        client.indices.refresh(index=index)
        store = client.indices.stats(index=index, metric="store").body["_all"]["primaries"]["store"]["size_in_bytes"]
        return {"passages": size, "seconds": seconds, "passages_per_s": size / seconds, "store_bytes": int(store)}
    finally:
        client.indices.delete(index=index, ignore_unavailable=True)
        writer.close() if hasattr(writer, "close") else None


def measure_embedding(documents: list, model: str, passages: int) -> dict:
    from icr2_components.stores.embedding import PassageEmbedder

    embedder = PassageEmbedder(model, batch_size=64, meta_fields=["title"], device="cpu")
    plain = [replace(d, embedding=None) for d in documents[: passages + 16]]
    list(embedder.embed_stream(plain[:16]))  # load the model and warm up outside the timing
    started = time.perf_counter()
    embedded = list(embedder.embed_stream(plain[16:16 + passages]))
    seconds = time.perf_counter() - started
    return {"model": model, "dims": len(embedded[0].embedding), "device": "cpu", "passages": len(embedded),
            "seconds": seconds, "passages_per_s": len(embedded) / seconds}


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    from icr2_components.stores import open_index
    from icr2_components.stores.elasticsearch.store import build_elasticsearch_client

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("ICR2_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument(
        "--sizes", default="1000,3000", help="two passage counts (comma-separated); capped at the sample's"
    )
    parser.add_argument("--embed-passages", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2, help="bulk requests in flight (writer.thread_count)")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument(
        "--index-prefix", default="icr2-plan-figures", help="the measuring indexes' name prefix (deleted after)"
    )
    parser.add_argument("--out", default=str(REPO_ROOT / "indexing" / "measured-figures.yaml"))
    args = parser.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    if len(sizes) != 2 or sizes[0] < 1:
        parser.error(f"--sizes takes two positive passage counts, got {args.sizes!r}.")

    console = Console()
    load_before = os.getloadavg()
    embedded_index = open_index(REPO_ROOT / "indexing" / "kilt-sample.yaml")
    documents = sorted(embedded_index.document_store.storage.values(), key=lambda d: d.id)
    capped = [min(s, len(documents)) for s in sizes]
    if capped != sizes:
        console.print(f"sizes {sizes} capped at the sample's {len(documents)} passages: {capped}")
        sizes = capped
    client = build_elasticsearch_client(args.url, request_timeout=120)
    node = node_info(client, args.url)
    console.print(f"measuring on {platform.node()} ({os.cpu_count()} cores, load {load_before[0]:.1f}), Elasticsearch "
                  f"{node['version']} at {args.url}, sizes {sizes}")
    results: dict[str, list[dict]] = {}
    for index_type in (*INDEX_TYPES, LEAN):
        results[index_type] = [
            measure_type(client, args.url, documents, index_type, size, args.index_prefix, args) for size in sizes
        ]
        big = results[index_type][-1]
        console.print(
            f"  {index_type}: {big['passages_per_s']:.0f} passages/s at {big['passages']}, store "
            f"{big['store_bytes']:,} B"
        )
    embedding = measure_embedding(documents, embedded_index.config.embedding.model, args.embed_passages)
    load_after = os.getloadavg()

    rates = {t: round(r[-1]["passages_per_s"], 1) for t, r in results.items()}
    disk = {}
    for index_type, (small, big) in results.items():
        slope = (big["store_bytes"] - small["store_bytes"]) / (big["passages"] - small["passages"])
        disk[index_type] = round(slope if slope > 0 else big["store_bytes"] / big["passages"], 1)
    # what the stored vectors add to _source: read by the plan of a config with store.vectors_in_source: false
    source_vector_bytes = round(max(0.0, disk["int8_hnsw"] - disk.pop(LEAN)), 1)
    rates.pop(LEAN)
    # only the load before the run says whether other work held the cores: the load after includes this bench's own
    # node and client (about 1.5 on 2 cores when nothing else runs)
    busy = load_before[0] > 0.5 * (os.cpu_count() or 1)
    figures = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            **machine_info(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
        },
        "node": node,
        "passages_measured": sizes,
        "embedding": {k: (round(v, 2) if isinstance(v, float) else v) for k, v in embedding.items()},
        "indexing_passages_per_s": rates,
        "disk_bytes_per_passage": disk,
        "source_vector_bytes_per_passage": source_vector_bytes,
        "runs": {
            t: [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in run.items()} for run in r]
            for t, r in results.items()
        },
        "command": "python bench/index_plan_figures.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "notes": [
            "Small sizes: HNSW graphs grow and merges rebuild them as an index grows, so per-passage indexing cost at "
            "36M passages is higher than at these sizes; the projection is a lower bound on time.",
            "Disk per passage is the slope between the two sizes of the force-merged primary store.",
            "Taken while other work used the cores (load average above half the cores before the run): re-measure on "
            "idle cores."
            if busy
            else "Taken on idle cores (load average at most half the cores before the run; after it, the bench's own).",
        ],
    }
    table = Table(title=f"index plan figures on {platform.node()} (Elasticsearch {node['version']})")
    for column in ("index type", "passages/s", "x BM25-only", "disk B/passage"):
        table.add_column(column, justify="right")
    for index_type in INDEX_TYPES:
        table.add_row(
            index_type,
            f"{rates[index_type]:.0f}",
            f"{rates[index_type] / rates['bm25_only']:.2f}",
            f"{disk[index_type]:.0f}",
        )
    console.print(table)
    console.print(f"the vectors in _source: {source_vector_bytes:.0f} B per passage (int8_hnsw with and without them)")
    console.print(
        f"embedding ({embedding['model']}, cpu): {embedding['passages_per_s']:.1f} passages/s over "
        f"{embedding['passages']}"
    )
    if busy:
        console.print(
            f"[yellow]load average {load_before[0]:.1f} -> {load_after[0]:.1f} on {os.cpu_count()} cores: these "
            "figures are not the machine's; re-measure on idle cores.[/yellow]"
        )
    header = ("# Measured by bench/index_plan_figures.py (the command below); read by `icr2 index --plan`.\n"
              "# Re-measure on the machine that will index, on idle cores, before trusting a plan.\n")
    Path(args.out).write_text(header + yaml.safe_dump(figures, sort_keys=False))
    console.print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
