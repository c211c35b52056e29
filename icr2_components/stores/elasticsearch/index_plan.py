"""``icr2 index --plan``: what an index config will cost before it is built, from figures measured on this machine.

For the configured corpus (e.g. the full KILT knowledge source: 5.9M articles, about 36M 100-word passages) and
the config's layout (:mod:`~icr2_components.stores.elasticsearch.index_layout`: shards, replicas, vector index type or
BM25
only), the plan projects:

- **passages**: counted in the corpus file when it is small, estimated from the first articles of a large one,
  and :data:`KILT_FULL_PASSAGES` when the file is not on this machine (the plan says which);
- **disk**: bytes per passage of an index of that type, measured on the node (``bench/index_plan_figures.py``),
  times the passages, times (1 + replicas) across the cluster;
- **vector memory**: the RAM the node's page cache must hold for fast kNN, by Elasticsearch's own formula for
  the vector index type (float32 ``4 * dims``, int8 ``dims + 4`` bytes per vector, plus ``4 * m`` for the HNSW
  graph; the flat types have no graph): https://www.elastic.co/guide/en/elasticsearch/reference/8.19/tune-knn-search.html
- **indexing time**: embedding and Elasticsearch indexing at the passages/s measured on this machine;

and says where one node stops being enough: vector memory beyond the node's RAM left over by its JVM heap, disk
beyond its disk up to the 85% low watermark, replicas (which need other nodes), shards above the ~50 GB size
Elasticsearch recommends.

The arithmetic is pure (:func:`project`); the measured figures are a small YAML file
(``indexing/measured-figures.yaml``) with the machine and the date they were taken on.

Usage:
    >>> from icr2_components.stores import load_index_config
    >>> from icr2_components.stores.elasticsearch.index_plan import load_measured_figures, plan_index
    >>> plan = plan_index(load_index_config("indexing/kilt-full-elasticsearch.yaml"), load_measured_figures())
    >>> plan["vector_memory_bytes"], plan["one_node_enough"]
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from icr2_components.stores.elasticsearch.index_layout import NODE_DEFAULT_VECTOR_INDEX, IndexLayout

if TYPE_CHECKING:
    from icr2_components.stores.config import IndexConfig

#: the full KILT knowledge source (kilt_knowledgesource.json, the 2019-08-01 Wikipedia snapshot): 5.9M articles
#: (KILT paper, https://arxiv.org/abs/2009.02252) and about 36M passages of 100 words (an estimate for
#: DPR-style 100-word passages of those articles). Used when the corpus file is not on this machine.
KILT_FULL_ARTICLES = 5_900_000
KILT_FULL_PASSAGES = 36_000_000
KILT_PASSAGE_WORDS = 100
#: the default measured-figures file, written by bench/index_plan_figures.py
DEFAULT_FIGURES = "measured-figures"  # the shipped file (icr2_components.resources), or a path
#: Elasticsearch stops allocating shards to a node whose disk is fuller than this
#: (cluster.routing.allocation.disk.watermark.low)
DISK_LOW_WATERMARK = 0.85
#: Elasticsearch's guidance: shards of at most about 50 GB ("Size your shards")
MAX_SHARD_BYTES = 50 * 10**9
#: corpus files up to this size are counted passage by passage; larger ones are estimated from a prefix
EXACT_COUNT_MAX_BYTES = 256 * 2**20
PREFIX_ARTICLES = 20_000
INDEX_TYPES = ("bm25_only", "hnsw", "int8_hnsw", "flat", "int8_flat")


class PlanError(ValueError):
    """The plan cannot be made (no measured figures, a store type without a plan); the message says what to do."""


@dataclass
class MeasuredFigures:
    """What ``bench/index_plan_figures.py`` measured on one machine (see ``indexing/measured-figures.yaml``)."""

    measured_at: str
    machine: dict[str, Any]
    node: dict[str, Any]
    embedding: dict[str, Any]
    indexing_passages_per_s: dict[str, float]
    disk_bytes_per_passage: dict[str, float]
    passages_measured: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # bytes per passage the vectors take in the stored _source (an index with store.vectors_in_source: false saves
    # them); None in figures measured before it was
    source_vector_bytes_per_passage: float | None = None
    source: str = ""

    def rate(self, index_type: str) -> float:
        return float(self.indexing_passages_per_s[index_type])

    def disk_per_passage(self, index_type: str) -> float:
        return float(self.disk_bytes_per_passage[index_type])


def load_measured_figures(path: str | Path = DEFAULT_FIGURES) -> MeasuredFigures:
    """Read and check the measured-figures file (a path, or the shipped ``measured-figures``); a missing file or key
    is a one-line error saying how to make it."""
    from icr2_components.resources.lookup import resolve_file

    try:
        path = resolve_file("indexing", path)
    except FileNotFoundError:
        path = Path(path)
    if not path.exists():
        raise PlanError(
            f"No measured figures at {path}: measure them on this machine with "
            "`python bench/index_plan_figures.py --out indexing/measured-figures.yaml` (needs the Elasticsearch node)."
        )
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    required = ("measured_at", "machine", "node", "embedding", "indexing_passages_per_s", "disk_bytes_per_passage")
    missing = [key for key in required if key not in data]
    if missing:
        raise PlanError(f"{path} lacks {missing}; re-measure with `python bench/index_plan_figures.py --out {path}`.")
    for key in ("indexing_passages_per_s", "disk_bytes_per_passage"):
        absent = [t for t in INDEX_TYPES if not isinstance((data[key] or {}).get(t), (int, float)) or data[key][t] <= 0]
        if absent:
            raise PlanError(
                f"{path}: {key} has no positive figure for {absent}; re-measure with `python "
                f"bench/index_plan_figures.py --out {path}`."
            )
    if (
        not isinstance(data["embedding"].get("passages_per_s"), (int, float))
        or data["embedding"]["passages_per_s"] <= 0
    ):
        raise PlanError(f"{path}: embedding.passages_per_s must be a positive number; re-measure.")
    known = {f for f in MeasuredFigures.__dataclass_fields__ if f != "source"}
    return MeasuredFigures(**{k: v for k, v in data.items() if k in known}, source=str(path))


# -- the arithmetic (pure) ---------------------------------------------------------------------------------


def vector_bytes_per_passage(index_type: str, dims: int, m: int = 16) -> int:
    """RAM per vector for fast kNN, by Elasticsearch's formula: float32 ``4*dims``, int8 ``dims + 4`` (the
    quantised copy; the float32 one stays on disk for rescoring), plus ``4*m`` for an HNSW graph."""
    base = {"hnsw": 4 * dims, "int8_hnsw": dims + 4, "flat": 4 * dims, "int8_flat": dims + 4}
    if index_type not in base:
        raise ValueError(f"index type must be one of {sorted(base)}, got {index_type!r}.")
    return base[index_type] + (4 * m if index_type.endswith("hnsw") else 0)


def project(
    passages: int,
    index_type: str,
    *,
    dims: int | None,
    m: int,
    replicas: int,
    shards: int,
    disk_bytes_per_passage: float,
    indexing_passages_per_s: float,
    embedding_passages_per_s: float | None,
    node_memory_bytes: int,
    node_heap_bytes: int,
    node_disk_available_bytes: int,
    node_disk_total_bytes: int,
) -> dict[str, Any]:
    """The projection for ``passages`` of an index of ``index_type`` (``bm25_only`` or a vector index type).

    Everything is per the whole cluster unless named ``per_node``; the node figures are one node's. Returns
    a JSON-able dict: disk (primary and with replicas), vector memory, seconds (embedding, indexing, total),
    each one-node budget, the passages one node holds before each limit, the nodes needed and the reasons.
    """
    if passages < 0:
        raise ValueError(f"passages must be >= 0, got {passages}.")
    vectors = index_type != "bm25_only"
    copies = 1 + replicas
    disk_primary = passages * disk_bytes_per_passage
    vector_per_passage = vector_bytes_per_passage(index_type, dims, m) if vectors else 0
    vector_primary = passages * vector_per_passage
    embed_s = passages / embedding_passages_per_s if vectors and embedding_passages_per_s else 0.0
    index_s = passages / indexing_passages_per_s
    vector_budget = max(0, node_memory_bytes - node_heap_bytes)  # off-heap: the page cache
    used = node_disk_total_bytes - node_disk_available_bytes
    disk_budget = max(0, int(DISK_LOW_WATERMARK * node_disk_total_bytes) - used)
    max_by_memory = math.floor(vector_budget / vector_per_passage) if vectors else None
    max_by_disk = math.floor(disk_budget / disk_bytes_per_passage)
    limits = []
    if vectors and vector_primary > vector_budget:
        limits.append(
            f"vector memory {format_bytes(vector_primary)} > the node's RAM beside its heap "
            f"{format_bytes(vector_budget)} "
            f"(one node holds {max_by_memory:,} passages' vectors)"
        )
    if disk_primary > disk_budget:
        limits.append(
            f"disk {format_bytes(disk_primary)} > the node's free disk to the 85% watermark "
            f"{format_bytes(disk_budget)} "
            f"(one node holds {max_by_disk:,} passages)"
        )
    if replicas:
        limits.append(f"replicas {replicas}: each copy of a shard needs another node")
    nodes_for_memory = (
        math.ceil(vector_primary * copies / vector_budget)
        if vectors and vector_budget
        else (0 if not vectors else None)
    )
    nodes_for_disk = math.ceil(disk_primary * copies / disk_budget) if disk_budget else None
    needed = [n for n in (nodes_for_memory, nodes_for_disk, copies) if n is not None]
    nodes_needed = max(needed) if needed else None
    shard_bytes = disk_primary / shards
    suggested_shards = max(1, math.ceil(disk_primary / MAX_SHARD_BYTES))
    return {
        "passages": int(passages),
        "index_type": index_type,
        "disk_bytes_primary": round(disk_primary),
        "disk_bytes_with_replicas": round(disk_primary * copies),
        "vector_bytes_per_passage": vector_per_passage,
        "vector_memory_bytes": round(vector_primary),
        "vector_memory_bytes_with_replicas": round(vector_primary * copies),
        "embedding_seconds": embed_s,
        "indexing_seconds": index_s,
        "total_seconds": embed_s + index_s,
        "node_vector_budget_bytes": vector_budget,
        "node_disk_budget_bytes": disk_budget,
        "max_passages_one_node_memory": max_by_memory,
        "max_passages_one_node_disk": max_by_disk,
        "one_node_enough": not limits,
        "one_node_limits": limits,
        "nodes_needed": nodes_needed,
        "shard_bytes": round(shard_bytes),
        "suggested_min_shards": suggested_shards,
        "shards_too_big": shard_bytes > MAX_SHARD_BYTES,
    }


def format_bytes(value: float) -> str:
    """``16.3 GB`` (decimal units, as disks are sold), ``512 B``."""
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def format_seconds(seconds: float) -> str:
    """``3.2 days``, ``5.1 h``, ``12 min``, ``40 s``."""
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


# -- the corpus and the node -------------------------------------------------------------------------------


def planned_passages(config: IndexConfig, override: int | None = None) -> tuple[int, str]:
    """(passages, where the number comes from) for the config's corpus."""
    if override is not None:
        if override < 0:
            raise PlanError(f"--passages must be >= 0, got {override}.")
        return override, "given with --passages"
    from icr2_components.kilt.knowledge_source import KiltKnowledgeSource
    from icr2_components.stores.config import corpus_path

    corpus = config.corpus
    if corpus.format != "kilt":
        from icr2_components.corpora import corpus_reader

        reader = corpus_reader(corpus)
        if not corpus.reads_documents:
            raise PlanError(f"corpus.format: {corpus.format} uses an index as it is: there is nothing to plan.")
        return sum(1 for _ in reader.documents()), f"counted in {reader.describe()}"
    if corpus.path != "sample" and not Path(corpus.path).expanduser().exists():
        passages = KILT_FULL_PASSAGES
        words = ""
        if corpus.passage_words != KILT_PASSAGE_WORDS:
            passages = round(passages * KILT_PASSAGE_WORDS / corpus.passage_words)
            words = f", scaled to {corpus.passage_words}-word passages"
        articles = ""
        if corpus.max_articles is not None and corpus.max_articles < KILT_FULL_ARTICLES:
            passages = round(passages * corpus.max_articles / KILT_FULL_ARTICLES)
            articles = f", scaled to corpus.max_articles {corpus.max_articles:,}"
        return passages, (
            f"constant KILT_FULL_PASSAGES ({KILT_FULL_PASSAGES:,} passages of {KILT_PASSAGE_WORDS} words in "
            f"{KILT_FULL_ARTICLES:,} articles{words}{articles}): corpus.path {corpus.path} is not on this machine"
        )
    path = corpus_path(config)
    size = path.stat().st_size

    def count(max_articles: int | None) -> int:
        source = KiltKnowledgeSource(
            path,
            passage_words=corpus.passage_words,
            skip_title_paragraph=corpus.skip_title_paragraph,
            max_articles=max_articles,
        )
        return sum(1 for _ in source.documents())

    if size <= EXACT_COUNT_MAX_BYTES:
        return count(corpus.max_articles), f"counted in {path}"
    prefix_articles, prefix_bytes = 0, 0
    with open(path, "rb") as handle:
        for line in handle:
            prefix_articles += 1
            prefix_bytes += len(line)
            if prefix_articles >= PREFIX_ARTICLES:
                break
    per_byte = count(prefix_articles) / max(1, prefix_bytes)
    total = round(per_byte * size)
    if corpus.max_articles is not None:
        total = min(total, round(count(prefix_articles) / prefix_articles * corpus.max_articles))
    return (
        total,
        f"estimated from the first {prefix_articles:,} articles ({prefix_bytes / 1e6:.0f} MB) of {path} "
        f"({size / 1e9:.1f} GB)",
    )


def node_resources(config: IndexConfig, figures: MeasuredFigures) -> dict[str, Any]:
    """One node's RAM, heap and disk: asked of the configured cluster (its smallest data node), else the node
    the figures were measured on."""
    from icr2_components.stores.elasticsearch.store import build_elasticsearch_client, describe_hosts

    url = describe_hosts(config.store.hosts)
    try:
        client = build_elasticsearch_client(config.store.hosts, request_timeout=5, max_retries=0)
        try:
            stats = client.nodes.stats(metric="os,jvm,fs").body["nodes"]
        finally:
            client.close()
    except Exception as error:  # any failure to ask falls back to the figures, and says so
        node = dict(figures.node)
        node["source"] = (
            f"the node measured on {figures.measured_at[:10]} ({figures.source}); {url} did not answer "
            f"({type(error).__name__})"
        )
        return node
    nodes = [
        {
            "memory_bytes": int(n["os"]["mem"]["total_in_bytes"]),
            "heap_max_bytes": int(n["jvm"]["mem"]["heap_max_in_bytes"]),
            "disk_total_bytes": int(n["fs"]["total"]["total_in_bytes"]),
            "disk_available_bytes": int(n["fs"]["total"]["available_in_bytes"]),
        }
        for n in stats.values()
    ]
    smallest = min(nodes, key=lambda n: (n["memory_bytes"] - n["heap_max_bytes"], n["disk_available_bytes"]))
    smallest["source"] = f"the cluster at {url} ({len(nodes)} node{'s' if len(nodes) != 1 else ''}; the smallest)"
    smallest["nodes"] = len(nodes)
    return smallest


def embedding_dims(config: IndexConfig, figures: MeasuredFigures) -> int:
    """The embedding model's dimension: the measured one for the same model, else the model's own."""
    if figures.embedding.get("model") == config.embedding.model and figures.embedding.get("dims"):
        return int(figures.embedding["dims"])
    from icr2_components.stores.embedding import PassageEmbedder

    return int(PassageEmbedder(config.embedding.model, device="cpu").dimension)


def plan_index(config: IndexConfig, figures: MeasuredFigures, passages: int | None = None,
               node: dict[str, Any] | None = None) -> dict[str, Any]:
    """The plan for an Elasticsearch index config: :func:`project` with the config's layout, the corpus's
    passages, the measured figures and one node's resources, and where each number comes from."""
    if config.store.type != "elasticsearch":
        raise PlanError(f"--plan projects an Elasticsearch index; {config.name} has store.type {config.store.type} "
                        "(the in-memory store holds the whole index in the Python process).")
    layout = IndexLayout.from_config(config)
    options = layout.effective_vector_index()
    index_type = options["type"] if options else "bm25_only"
    m = int(options.get("m", NODE_DEFAULT_VECTOR_INDEX["m"])) if options else 0
    count, count_source = planned_passages(config, passages)
    node = node if node is not None else node_resources(config, figures)
    dims = embedding_dims(config, figures) if options else None
    disk_per_passage = figures.disk_per_passage(index_type)
    disk_note = None
    if options and not layout.vectors_in_source:
        if figures.source_vector_bytes_per_passage is None:
            disk_note = (
                "store.vectors_in_source is false but the figures do not measure what the vectors take in "
                "_source: the disk shown includes them (an upper bound); re-measure with bench/index_plan_figures.py"
            )
        else:
            disk_per_passage -= float(figures.source_vector_bytes_per_passage)
            disk_note = (f"vectors left out of _source: {figures.source_vector_bytes_per_passage:.0f} B per passage "
                         "less than the measured figure")
    result = project(
        count,
        index_type,
        dims=dims,
        m=m,
        replicas=layout.replicas,
        shards=layout.shards,
        disk_bytes_per_passage=disk_per_passage,
        indexing_passages_per_s=figures.rate(index_type),
        embedding_passages_per_s=float(figures.embedding["passages_per_s"]) if options else None,
        node_memory_bytes=int(node["memory_bytes"]),
        node_heap_bytes=int(node["heap_max_bytes"]),
        node_disk_available_bytes=int(node["disk_available_bytes"]),
        node_disk_total_bytes=int(node["disk_total_bytes"]),
    )
    device = config.embedding.device or "cpu"
    result.update(
        {
            "config": config.name,
            "layout": layout.describe(),
            "dims": dims,
            "hnsw_m": m if index_type.endswith("hnsw") else None,
            "passages_source": count_source,
            "disk_note": disk_note,
            "node": node,
            "figures": {
                "file": figures.source,
                "measured_at": figures.measured_at,
                "machine": figures.machine,
                "passages_measured": figures.passages_measured,
                "embedding": figures.embedding,
                "notes": figures.notes,
            },
            "embedding_device_note": (
                None
                if device == figures.embedding.get("device", "cpu")
                else f"the config embeds on {device}; "
                f"the rate is {figures.embedding.get('device', 'cpu')}'s on this machine"
            ),
        }
    )
    return result


def plan_json(plan: dict[str, Any]) -> str:
    return json.dumps(plan, indent=2, default=str)


__all__ = [
    "DEFAULT_FIGURES",
    "KILT_FULL_ARTICLES",
    "KILT_FULL_PASSAGES",
    "MeasuredFigures",
    "PlanError",
    "format_bytes",
    "format_seconds",
    "load_measured_figures",
    "node_resources",
    "plan_index",
    "plan_json",
    "planned_passages",
    "project",
    "vector_bytes_per_passage",
]
