"""The ICR2 retrieval head on the real SmolLM2: joint training lowers the retrieval loss on a real NQ-sample
example, and RetrievalHeadRanker loads the trained head by path and runs in the committed YAML pipeline."""

from pathlib import Path

import pytest

from icr2_components.training.recipe import recipe_from_dict


@pytest.fixture(scope="module")
def trained_head(tmp_path_factory):
    from icr2_components.training.joint import train_retrieval_head
    from icr2_components.training.sample_data import build_sample_benchmark

    root = tmp_path_factory.mktemp("head")
    build_sample_benchmark(root / "train.jsonl", limit=2, budget_passages=2)
    recipe = recipe_from_dict({
        "method": "retrieval_head", "model": "smollm2-135m-instruct", "output_dir": str(root / "out"),
        "data": {"train": str(root / "train.jsonl"), "limit": 1},
        "training": {"max_steps": 4, "gradient_accumulation_steps": 1, "device": "cpu"},
        "retrieval_head": {"top_k": 1, "loss": "joint", "head_learning_rate": 1e-3},
    })
    return train_retrieval_head(recipe, progress=False), root


def test_joint_training_lowers_the_retrieval_loss(trained_head):
    summary, root = trained_head
    history = summary["history"]
    assert len(history) == 4 and all("generation" in step for step in history)
    assert history[-1]["retrieval"] < history[0]["retrieval"]
    assert history[-1]["tau"] < history[0]["tau"]
    assert (root / "out" / "retrieval_head" / "model.safetensors").exists()


def test_ranker_round_trips_and_refuses_a_missing_head(trained_head, tmp_path):
    from icr2_components.rankers import RetrievalHeadRanker

    _, root = trained_head
    ranker = RetrievalHeadRanker(head=str(root / "out"), top_k=1)
    assert RetrievalHeadRanker.from_dict(ranker.to_dict()).to_dict() == ranker.to_dict()
    with pytest.raises(FileNotFoundError, match="icr2 train"):
        RetrievalHeadRanker(head=str(tmp_path))
    with pytest.raises(ValueError, match="top_k"):
        RetrievalHeadRanker(head=str(root / "out"), top_k=0)


def test_ranker_runs_in_the_yaml_pipeline(trained_head):
    from icr2_components.pipeline_loading import loads_pipeline

    _, root = trained_head
    text = Path("pipelines/retrieval_head_ranked.yaml").read_text().replace("runs/smollm2-cpu-retrieval-head", str(root / "out"))
    pipeline = loads_pipeline(text)
    result = pipeline.run({"query": "who got the first nobel prize in physics"}, include_outputs_from={"ranker"})
    report = result["ranker"]["report"]
    assert report["passages_in"] == 4 and report["passages_out"] == 1
    assert "retrieval_head_score" in result["ranker"]["documents"][0].meta
    assert result["reader"]["replies"][0].text
