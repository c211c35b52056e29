"""`icr2 index --plan`: the projection arithmetic on hand-worked numbers, the passage count's source, and the
command's table and JSON (node figures from a measured-figures file when the configured node does not answer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from icr2_components.cli import main
from icr2_components.stores import load_index_config
from icr2_components.stores.elasticsearch.index_plan import (
    INDEX_TYPES,
    KILT_FULL_PASSAGES,
    PlanError,
    format_bytes,
    format_seconds,
    load_measured_figures,
    planned_passages,
    project,
    vector_bytes_per_passage,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
NODE = dict(
    node_memory_bytes=64 * 10**9,
    node_heap_bytes=16 * 10**9,
    node_disk_total_bytes=10**12,
    node_disk_available_bytes=5 * 10**11,
)


def test_vector_bytes_per_passage_follow_elasticsearchs_formula():
    # 384 dims, m 16: float32 4*384 = 1536, int8 384 + 4 = 388, the HNSW graph 4*16 = 64
    assert vector_bytes_per_passage("hnsw", 384, 16) == 1600
    assert vector_bytes_per_passage("int8_hnsw", 384, 16) == 452
    assert vector_bytes_per_passage("flat", 384, 16) == 1536
    assert vector_bytes_per_passage("int8_flat", 384, 16) == 388
    assert vector_bytes_per_passage("hnsw", 768, 32) == 3072 + 128
    with pytest.raises(ValueError, match="index type must be one of"):
        vector_bytes_per_passage("ivf", 384)


def test_full_kilt_int8_hnsw_on_a_64_gb_node_fits_in_memory_and_disk():
    plan = project(KILT_FULL_PASSAGES, "int8_hnsw", dims=384, m=16, replicas=0, shards=1, disk_bytes_per_passage=1000,
                   indexing_passages_per_s=1000, embedding_passages_per_s=100, **NODE)
    assert plan["vector_bytes_per_passage"] == 452
    assert plan["vector_memory_bytes"] == 16_272_000_000          # 36M * 452
    assert plan["disk_bytes_primary"] == plan["disk_bytes_with_replicas"] == 36_000_000_000  # 36M * 1000
    assert plan["embedding_seconds"] == 360_000                    # 36M / 100
    assert plan["indexing_seconds"] == 36_000                      # 36M / 1000
    assert plan["total_seconds"] == 396_000
    assert plan["node_vector_budget_bytes"] == 48_000_000_000      # 64 GB RAM - 16 GB heap
    assert plan["node_disk_budget_bytes"] == 350_000_000_000       # 0.85 * 1 TB - 0.5 TB used
    assert plan["max_passages_one_node_memory"] == 106_194_690    # floor(48e9 / 452)
    assert plan["max_passages_one_node_disk"] == 350_000_000       # 0.35e12 / 1000
    assert plan["one_node_enough"] and plan["one_node_limits"] == [] and plan["nodes_needed"] == 1
    assert plan["shard_bytes"] == 36_000_000_000 and plan["suggested_min_shards"] == 1 and not plan["shards_too_big"]


def test_full_kilt_float32_hnsw_with_a_replica_needs_three_such_nodes():
    plan = project(KILT_FULL_PASSAGES, "hnsw", dims=384, m=16, replicas=1, shards=1, disk_bytes_per_passage=1000,
                   indexing_passages_per_s=500, embedding_passages_per_s=None, **NODE)
    assert plan["vector_memory_bytes"] == 57_600_000_000           # 36M * 1600 > the 48 GB budget
    assert plan["vector_memory_bytes_with_replicas"] == 115_200_000_000
    assert plan["disk_bytes_with_replicas"] == 72_000_000_000
    assert plan["max_passages_one_node_memory"] == 30_000_000      # 48e9 / 1600
    assert plan["nodes_needed"] == 3                               # ceil(115.2 / 48)
    assert not plan["one_node_enough"]
    assert plan["one_node_limits"][0].startswith(
        "vector memory 57.6 GB > the node's RAM beside its heap 48.0 GB (one node holds 30,000,000"
    )
    assert plan["one_node_limits"][1] == "replicas 1: each copy of a shard needs another node"
    assert plan["embedding_seconds"] == 0 and plan["indexing_seconds"] == 72_000


def test_bm25_only_has_no_vector_memory_and_big_shards_are_flagged():
    plan = project(KILT_FULL_PASSAGES, "bm25_only", dims=None, m=0, replicas=0, shards=1, disk_bytes_per_passage=2000,
                   indexing_passages_per_s=2000, embedding_passages_per_s=50, **NODE)
    assert plan["vector_memory_bytes"] == 0 and plan["max_passages_one_node_memory"] is None
    assert plan["embedding_seconds"] == 0 and plan["indexing_seconds"] == 18_000
    assert plan["disk_bytes_primary"] == 72_000_000_000
    assert plan["shards_too_big"] and plan["suggested_min_shards"] == 2   # ceil(72 / 50)
    assert plan["one_node_enough"]
    small_disk = dict(
        NODE, node_disk_total_bytes=100 * 10**9, node_disk_available_bytes=90 * 10**9
    )  # budget 85 - 10 = 75 GB
    tight = project(KILT_FULL_PASSAGES, "bm25_only", dims=None, m=0, replicas=0, shards=2, disk_bytes_per_passage=2500,
                    indexing_passages_per_s=2000, embedding_passages_per_s=None, **small_disk)
    assert tight["node_disk_budget_bytes"] == 75_000_000_000
    assert tight["max_passages_one_node_disk"] == 30_000_000 and tight["nodes_needed"] == 2  # 90 GB / 75 GB
    assert tight["one_node_limits"] == [
        "disk 90.0 GB > the node's free disk to the 85% watermark 75.0 GB (one node holds 30,000,000 passages)"
    ]


@pytest.mark.unit
def test_formatting():
    assert format_bytes(16_272_000_000) == "16.3 GB" and format_bytes(512) == "512 B"
    assert (
        format_seconds(396_000) == "4.6 days" and format_seconds(36_000) == "10.0 h" and format_seconds(600) == "10 min"
    )


def test_passage_count_sources(sample_files):
    full = load_index_config(REPO_ROOT / "indexing" / "kilt-full-elasticsearch.yaml")
    count, source = planned_passages(full)
    assert (
        count == KILT_FULL_PASSAGES
        and source.startswith("constant KILT_FULL_PASSAGES")
        and "not on this machine" in source
    )
    half = load_index_config(
        REPO_ROOT / "indexing" / "kilt-full-elasticsearch.yaml", overrides={"corpus.max_articles": 590_000}
    )
    assert planned_passages(half)[0] == 3_600_000                  # a tenth of the articles
    sample = load_index_config(REPO_ROOT / "indexing" / "kilt-sample-elasticsearch.yaml")
    from icr2_components.kilt import KiltKnowledgeSource

    counted, source = planned_passages(sample)
    assert counted == sum(1 for _ in KiltKnowledgeSource(sample_files.corpus).documents()) and source.startswith(
        "counted in "
    )
    assert planned_passages(sample, 10) == (10, "given with --passages")


def figures_file(tmp_path: Path, **extra) -> Path:
    figures = {
        "measured_at": "2026-11-23T00:00:00+00:00",
        "machine": {"hostname": "test", "cpu_count": 2, "cpu_model": "test", "load_average_before": [0.1]},
        "node": {
            "memory_bytes": 64 * 10**9,
            "heap_max_bytes": 16 * 10**9,
            "disk_total_bytes": 10**12,
            "disk_available_bytes": 5 * 10**11,
        },
        "passages_measured": [1000, 3000],
        "embedding": {"model": "all-minilm-l6-v2", "dims": 384, "device": "cpu", "passages_per_s": 100},
        "indexing_passages_per_s": {"bm25_only": 2000, "hnsw": 500, "int8_hnsw": 1000, "flat": 800, "int8_flat": 900},
        "disk_bytes_per_passage": {"bm25_only": 700, "hnsw": 8000, "int8_hnsw": 1000, "flat": 7900, "int8_flat": 8400},
        "notes": ["hand-made figures for a test"],
        **extra,
    }
    path = tmp_path / "figures.yaml"
    path.write_text(yaml.safe_dump(figures))
    return path


def test_plan_json_for_the_full_kilt_config(tmp_path, capsys):
    # the configured node does not answer (a closed port): the node figures come from the figures file, and say so
    code = main(["index", "--plan", "indexing/kilt-full-elasticsearch.yaml", "--figures", str(figures_file(tmp_path)),
                 "--set", "store.hosts=http://127.0.0.1:1", "--json"])
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["passages"] == KILT_FULL_PASSAGES and plan["index_type"] == "int8_hnsw"   # the node's default type
    assert plan["vector_memory_bytes"] == 16_272_000_000 and plan["disk_bytes_primary"] == 36_000_000_000
    assert plan["indexing_seconds"] == 36_000 and plan["embedding_seconds"] == 360_000
    # the shipped layout keeps one replica (docs/benchmarks/indexing-and-scale.md "Scale bench"): two nodes like this
    # one at least
    assert not plan["one_node_enough"] and plan["nodes_needed"] == 2 and "did not answer" in plan["node"]["source"]
    assert any(limit.startswith("replicas 1") for limit in plan["one_node_limits"])
    assert plan["embedding_device_note"] == "the config embeds on cuda; the rate is cpu's on this machine"


def test_plan_table_for_a_float32_layout_says_where_one_node_stops(tmp_path, capsys):
    code = main(["index", "--plan", "indexing/kilt-full-elasticsearch.yaml", "--figures", str(figures_file(tmp_path)),
                 "--set", "store.hosts=http://127.0.0.1:1", "--set", "store.replicas=1", "--set", "store.shards=1",
                 "--set", "store.vector_index={type: hnsw, m: 16}"])
    assert code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "36,000,000" in out and "57.6 GB" in out and "One node is not enough (at least 3 nodes like it)" in out
    assert "replicas 1: each copy of a shard needs another node" in out
    assert "set store.shards >= 6" in out                          # 288 GB of primaries / 50 GB


def test_plan_of_vectors_left_out_of_source_takes_their_measured_bytes_off_the_disk(tmp_path, capsys):
    def plan(figures: Path, in_source: str) -> dict:
        assert main(["index", "--plan", "indexing/kilt-full-elasticsearch.yaml", "--figures", str(figures), "--set",
                     "store.hosts=http://127.0.0.1:1", "--set", f"store.vectors_in_source={in_source}", "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    measured = figures_file(tmp_path, source_vector_bytes_per_passage=400)
    full, lean = plan(measured, "true"), plan(measured, "false")
    assert full["disk_bytes_primary"] == 36_000_000_000 and full["disk_note"] is None
    assert lean["disk_bytes_primary"] == 36_000_000_000 - 36_000_000 * 400
    assert lean["disk_note"].startswith("vectors left out of _source: 400 B per passage less")
    assert lean["vector_memory_bytes"] == full["vector_memory_bytes"]          # still indexed for kNN
    (tmp_path / "old").mkdir()
    old = plan(figures_file(tmp_path / "old"), "false")                         # figures measured before the option
    assert old["disk_bytes_primary"] == 36_000_000_000 and "an upper bound" in old["disk_note"]


def test_plan_errors_are_one_line(tmp_path, capsys):
    assert main(["index", "--plan", "indexing/kilt-sample.yaml", "--figures", str(figures_file(tmp_path))]) == 1
    assert "--plan projects an Elasticsearch index; kilt-sample has store.type in_memory" in capsys.readouterr().err
    assert (
        main(["index", "--plan", "indexing/kilt-full-elasticsearch.yaml", "--figures", str(tmp_path / "none.yaml")])
        == 1
    )
    error = capsys.readouterr().err.strip()
    assert "No measured figures at" in error and "bench/index_plan_figures.py" in error and "\n" not in error
    assert main(["index"]) == 1
    assert "needs --config CONFIG (build the index) or --plan CONFIG" in capsys.readouterr().err
    with pytest.raises(PlanError, match="lacks"):
        bad = tmp_path / "bad.yaml"
        bad.write_text("measured_at: x\n")
        load_measured_figures(bad)


def test_the_committed_figures_are_what_their_runs_measured(minilm):
    """Each figure the plan projects with follows from the raw runs recorded beside it: the indexing rate is the
    largest run's, disk per passage the slope of the force-merged store between the two sizes, the bytes vectors
    take in _source the difference of two such slopes, the embedding rate passages over seconds, and the vectors'
    dimension the bundled MiniLM's."""
    path = REPO_ROOT / "indexing" / "measured-figures.yaml"
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    figures = load_measured_figures(path)
    assert figures.passages_measured == raw["passages_measured"] == [1000, 3000]

    def slope(runs: list[dict]) -> float:
        small, large = sorted(runs, key=lambda run: run["passages"])
        return (large["store_bytes"] - small["store_bytes"]) / (large["passages"] - small["passages"])

    for index_type in INDEX_TYPES:
        runs = raw["runs"][index_type]
        assert [run["passages"] for run in runs] == figures.passages_measured
        for run in runs:
            assert run["passages_per_s"] == pytest.approx(run["passages"] / run["seconds"], rel=0.01)
        largest = max(runs, key=lambda run: run["passages"])["passages_per_s"]
        assert figures.rate(index_type) == raw["indexing_passages_per_s"][index_type]
        assert figures.rate(index_type) == pytest.approx(largest, abs=0.05)
        assert figures.disk_per_passage(index_type) == pytest.approx(slope(runs), abs=0.05)
    # HNSW costs more per passage than BM25 alone, in time and on disk
    assert figures.rate("hnsw") < figures.rate("bm25_only")
    assert figures.disk_per_passage("bm25_only") < min(figures.disk_per_passage(t) for t in INDEX_TYPES[1:])
    lean = slope(raw["runs"]["int8_hnsw_vectors_not_in_source"])
    assert figures.source_vector_bytes_per_passage == pytest.approx(slope(raw["runs"]["int8_hnsw"]) - lean, abs=0.05)
    embedding = figures.embedding
    assert embedding["passages_per_s"] == pytest.approx(embedding["passages"] / embedding["seconds"], rel=0.01)
    assert embedding["model"] == "all-minilm-l6-v2"
    assert embedding["dims"] == minilm.get_embedding_dimension() == 384
    assert figures.node["heap_max_bytes"] < figures.node["memory_bytes"]
    assert figures.node["disk_available_bytes"] <= figures.node["disk_total_bytes"]


@pytest.mark.elasticsearch
def test_plan_asks_the_configured_node_for_its_resources(elasticsearch_url, es_client, tmp_path, capsys):
    code = main(["index", "--plan", "indexing/kilt-sample-elasticsearch.yaml", "--figures", str(figures_file(tmp_path)),
                 "--set", f"store.hosts={elasticsearch_url}", "--json"])
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    stats = next(iter(es_client.nodes.stats(metric="os,jvm").body["nodes"].values()))
    assert plan["node"]["source"].startswith(f"the cluster at {elasticsearch_url}")
    assert plan["node"]["memory_bytes"] == stats["os"]["mem"]["total_in_bytes"]
    assert plan["node"]["heap_max_bytes"] == stats["jvm"]["mem"]["heap_max_in_bytes"]
    assert plan["passages_source"].startswith("counted in ") and plan["passages"] > 1000
