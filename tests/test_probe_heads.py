"""Hit rates, head selection, the artifact and `icr2 probe-heads` on real NQ-sample CiC instances and SmolLM2."""

import json

import pytest
import torch

from icr2_components.artifacts.base import ArtifactMismatchError
from icr2_components.artifacts.retrieval_heads import RetrievalHeadArtifact
from icr2_components.filters.passage_scoring import top_m_indices
from icr2_components.filters.probing.head_probing import chance_hit_rate, instance_hit_rates, select_heads


def test_hit_rate_counts_gold_within_each_heads_top_m():
    # 2 layers x 2 heads x 4 passages; gold is PSG002 and PSG004.
    scores = torch.tensor([
        [[0.1, 0.5, 0.3, 0.1], [0.4, 0.1, 0.2, 0.3]],
        [[0.0, 0.1, 0.2, 0.7], [0.3, 0.3, 0.3, 0.1]],
    ])
    rates = instance_hit_rates(scores, ["PSG001", "PSG002", "PSG003", "PSG004"], ["PSG002", "PSG004"], max_m=3)
    assert rates.shape == (3, 2, 2)
    assert rates[0].tolist() == [[0.5, 0.0], [0.5, 0.0]]      # top-1: PSG002 | PSG001 ; PSG004 | PSG001 (tie -> first)
    assert rates[1].tolist() == [[0.5, 0.5], [0.5, 0.5]]      # top-2 adds PSG003 | PSG004 ; PSG003 | PSG002
    assert rates[2].tolist() == [[0.5, 0.5], [1.0, 0.5]]


def test_m_beyond_the_passages_keeps_all_of_them():
    scores = torch.tensor([[[0.9, 0.1]]])
    rates = instance_hit_rates(scores, ["PSG001", "PSG002"], ["PSG002"], max_m=4)
    assert rates[:, 0, 0].tolist() == [0.0, 1.0, 1.0, 1.0]
    assert top_m_indices(scores, 5).shape[-1] == 2
    assert chance_hit_rate(2, 1, 4) == 1.0


def test_hit_rate_refuses_contexts_without_gold():
    with pytest.raises(ValueError, match="None of the gold passages"):
        instance_hit_rates(torch.ones(1, 1, 2), ["PSG001", "PSG002"], ["PSG009"], max_m=1)


def test_select_heads_ranks_by_hit_rate():
    rates = torch.tensor([[0.1, 0.9, 0.2], [0.9, 0.3, 0.5]])
    assert select_heads(rates, 3) == [(0, 1), (1, 0), (1, 2)]
    with pytest.raises(ValueError, match="Q must be between 1 and 6"):
        select_heads(rates, 7)


@pytest.fixture(scope="module")
def benchmark_file(tmp_path_factory, sample_files):
    """A small ICR2-format benchmark JSONL written from NQ-sample CiC instances (gold + BM25 confounders)."""
    from icr2_components.training.sample_data import nq_sample_instances

    path = tmp_path_factory.mktemp("bench") / "val.jsonl"
    with open(path, "w") as handle:
        for instance in nq_sample_instances(3, passages=3, offset=40):
            handle.write(json.dumps({
                "id": instance.id, "query": instance.query, "answers": instance.answers, "task_type": "qa",
                "context": [{"passage_id": d.meta["passage_id"], "doc_id": d.id, "title": d.meta.get("title", ""),
                             "text": d.content, "origin": d.meta.get("origin")} for d in instance.documents],
                "gold_passage_ids": instance.gold_passage_ids,
            }) + "\n")
        handle.write("{not json\n")
    return path


def test_probe_heads_cli_writes_artifact_and_heatmap(benchmark_file, tmp_path, smollm2, capsys):
    from icr2_components.cli import main

    output = tmp_path / "heads.json"
    code = main(["probe-heads", "--benchmark", str(benchmark_file), "--output", str(output), "--limit", "2",
                 "--m", "1", "--q", "3", "--max-m", "2", "--dtype", "float32", "--device", "cpu"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "skipped 1 (1 malformed record)" in printed
    artifact = RetrievalHeadArtifact.load(output)
    assert artifact.model == "smollm2-135m-instruct" and artifact.instances == 2
    assert artifact.model_signature["num_layers"] == 30 and artifact.model_signature["num_heads"] == 9
    assert len(artifact.heads) == 3 and len(artifact.hit_rates) == 2
    assert artifact.query_position_mode == "last_prompt_token" and artifact.task_type == "qa"
    best = artifact.head_hit_rate(*artifact.heads[0])
    assert best == max(max(row) for row in artifact.hit_rates[0])
    assert output.with_suffix(".png").stat().st_size > 1000
    # the questions it was probed on: the 2 instances drawn with the seed (icr2 compare leaves them out)
    from icr2_components.filters.probing.cic_instances import read_benchmark_instances
    from icr2_components.filters.probing.probing_job import choose_instances

    drawn = choose_instances(list(read_benchmark_instances(benchmark_file)), 2, seed=0)
    assert artifact.probed_ids == [i.id for i in drawn] and artifact.probed_ids_note == ""
    # The artifact refuses to serve a model of another shape, naming both.
    other = dict(artifact.model_signature, num_layers=24)
    with pytest.raises(ArtifactMismatchError, match=r"probed on smollm2-135m-instruct .* 30 layers"):
        artifact.check_model("some-org/other-model", other)


def test_probe_heads_cli_reports_a_missing_benchmark(tmp_path, capsys):
    from icr2_components.cli import main

    assert main(["probe-heads", "--benchmark", str(tmp_path / "absent.jsonl")]) == 1
    assert "icr2 build-benchmark" in capsys.readouterr().err
