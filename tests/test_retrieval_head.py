"""The ICR2 retrieval head on the real SmolLM2: what joint training does to the retrieval loss over several real
NQ-sample examples (against the retrieval loss alone on the same examples), and RetrievalHeadRanker loads the
trained head by path and runs in the committed YAML pipeline, keeping the passage its head scores highest.

Whether a trained head ranks the gold passages of questions it never saw above chance is measured at the scale of
the registered ICR2 Table 3 run, not here (docs/benchmarks/rap-and-heads.md, "The retrieval head at the registered
scale"): over 1,000
training questions neither the joint objective nor the retrieval loss alone takes the head above chance on the 100
dev questions (recall@2 0.34 and 0.35 against 0.33), and the RetHead arm's selections on the 426 evaluation
questions are tested against chance in `bench/results/icr2_table3/report.md`. The two strict xfails this file held
(L_ret not lowered on 6 examples; 7/16 held-apart hits against 4 by chance) were resolved by those measurements."""

import statistics
from pathlib import Path

import pytest

from icr2_components.training.recipe import recipe_from_dict

TRAIN_EXAMPLES, EPOCHS = 6, 2


def _train(root, loss: str, steps: int = TRAIN_EXAMPLES * EPOCHS, **head):
    from icr2_components.training.joint import train_retrieval_head
    from icr2_components.training.sample_data import build_sample_benchmark

    built = build_sample_benchmark(root / "train.jsonl", limit=TRAIN_EXAMPLES + 1, budget_passages=2)
    assert built["written"] == TRAIN_EXAMPLES, built["skips"]
    recipe = recipe_from_dict({
        "method": "retrieval_head", "model": "smollm2-135m-instruct", "output_dir": str(root / "out"),
        "data": {"train": str(root / "train.jsonl")},
        "training": {"max_steps": steps, "gradient_accumulation_steps": 1, "device": "cpu"},
        "retrieval_head": {"top_k": 1, "loss": loss, "head_learning_rate": 1e-3, **head},
    })
    return train_retrieval_head(recipe, progress=False)


@pytest.fixture(scope="module")
def trained_head(tmp_path_factory):
    # the first 7 sample questions: nq-sample-00004 has 3 gold passages, more than 2, and is skipped (counted)
    root = tmp_path_factory.mktemp("head")
    return _train(root, "joint"), root


def _epoch_means(history):
    return (statistics.fmean(step["retrieval"] for step in history[:TRAIN_EXAMPLES]),
            statistics.fmean(step["retrieval"] for step in history[-TRAIN_EXAMPLES:]))


@pytest.fixture(scope="module")
def retrieval_only_head(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("retrieval-only"), "retrieval")


def test_retrieval_loss_training_fits_its_training_examples(retrieval_only_head):
    """The head alone (reader frozen, retrieval loss only) fits the 6 examples it trains on: one epoch later their
    mean L_ret is lower (measured: 0.61 -> 0.22). This is fitting, not generalisation: what the head does on
    questions it did not train on is measured at the registered scale (module docstring)."""
    first, last = _epoch_means(retrieval_only_head["history"])
    assert last < first, (first, last)


def test_the_generation_term_keeps_the_joint_heads_retrieval_loss_above_the_retrieval_only_heads(
        trained_head, retrieval_only_head):
    """Why joint training does not lower L_ret on these 6 examples (a strict xfail until this measurement): on the
    same examples, steps and head learning rate, the retrieval loss alone takes their L_ret from 0.61 to 0.22,
    while with the generation term (through the straight-through top-1 mask) it goes from 0.63 to 0.99 (measured
    when this was an xfail): the generation gradient pulls an example's choice to a confounder. At the registered
    scale (1,000 questions) the same holds: the joint head ends above a uniform head's L_ret (dev 2.13 against
    ln 6 = 1.79), the retrieval-only head at it (1.75); docs/benchmarks/rap-and-heads.md, "The retrieval head at the
    registered
    scale"."""
    summary, root = trained_head
    history = summary["history"]
    assert summary["train_examples"] == TRAIN_EXAMPLES
    assert len(history) == TRAIN_EXAMPLES * EPOCHS and all("generation" in step for step in history)
    assert history[-1]["tau"] < history[0]["tau"]
    assert (root / "out" / "retrieval_head" / "model.safetensors").exists()
    joint_last = _epoch_means(history)[1]
    retrieval_last = _epoch_means(retrieval_only_head["history"])[1]
    assert joint_last > retrieval_last, (joint_last, retrieval_last)


def test_ranker_round_trips_and_refuses_a_missing_head(trained_head, tmp_path):
    from icr2_components.rankers import RetrievalHeadRanker

    _, root = trained_head
    from haystack.core.serialization import component_from_dict, component_to_dict

    ranker = RetrievalHeadRanker(head=str(root / "out"), top_k=1)
    data = component_to_dict(ranker, "ranker")  # Haystack's default serialisation
    assert component_to_dict(component_from_dict(RetrievalHeadRanker, data, "ranker"), "ranker") == data
    assert data["init_parameters"] == {"head": str(root / "out"), "model": None, "top_k": 1, "keep_order": False,
                                       "dtype": "float32", "device": None, "max_context_tokens": None}
    # The head is read at warm_up (moved there from __init__): building touches nothing on disk.
    missing = RetrievalHeadRanker(head=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="icr2 train"):
        missing.warm_up()
    with pytest.raises(FileNotFoundError, match="icr2 train"):  # a run without warm_up warms up first
        missing.run(documents=[], query="q")
    (tmp_path / "config.json").write_text('{"format": "something else"}')  # a config.json that is not a head's
    with pytest.raises(FileNotFoundError, match="icr2 train"):
        RetrievalHeadRanker(head=str(tmp_path)).warm_up()
    with pytest.raises(ValueError, match="top_k"):
        RetrievalHeadRanker(head=str(root / "out"), top_k=0)


def test_ranker_runs_in_the_yaml_pipeline(trained_head):
    from icr2_components.pipeline_loading import loads_pipeline

    _, root = trained_head
    text = (
        Path("pipelines/retrieval_head_ranked.yaml")
        .read_text()
        .replace("runs/smollm2-cpu-retrieval-head", str(root / "out"))
    )
    pipeline = loads_pipeline(text)
    query = "who got the first nobel prize in physics"
    result = pipeline.run({"query": query}, include_outputs_from={"corpus", "ranker", "prompt"})
    report = result["ranker"]["report"]
    assert report["passages_in"] == 4 and report["passages_out"] == 1
    assert "retrieval_head_score" in result["ranker"]["documents"][0].meta
    assert result["reader"]["replies"][0].text
    # the kept passage is the one the trained head scores highest among the corpus in context, and it is the
    # only passage the reader reads
    from icr2_components.rankers import RetrievalHeadRanker

    candidates = result["corpus"]["documents"]
    scored = RetrievalHeadRanker(head=str(root / "out"), top_k=len(candidates)).run(documents=candidates, query=query)
    best = max(scored["documents"], key=lambda d: d.meta["retrieval_head_score"])
    kept = result["ranker"]["documents"][0]
    assert kept.id == best.id and kept.meta["retrieval_head_score"] == pytest.approx(best.meta["retrieval_head_score"])
    prompt = result["prompt"]["prompt"][-1].text
    assert [d.id for d in candidates if d.content in prompt] == [kept.id]


def test_query_aware_joint_examples_name_the_question_before_the_corpus_and_keep_the_target(tmp_path):
    """``retrieval_head.query_aware``: the head pools passages that come after a first mention of the question (so
    their hidden states can attend to it), and the generation term reads that same prompt followed by the
    example's unchanged target."""
    from transformers import AutoTokenizer

    from icr2_components.models.resolver import resolve_model
    from icr2_components.training.dataset import load_sft_examples
    from icr2_components.training.joint import joint_examples
    from icr2_components.training.sample_data import build_sample_benchmark

    build_sample_benchmark(tmp_path / "train.jsonl", limit=3, budget_passages=3)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
    examples = load_sft_examples(tmp_path / "train.jsonl", tokenizer, "da", 2048).examples
    plain, aware = joint_examples(examples, tokenizer), joint_examples(examples, tokenizer, query_aware=True)
    for example, before, after in zip(examples, plain, aware, strict=True):
        assert before.full_ids[0].tolist() == example.input_ids and before.labels[0].tolist() == example.labels
        target = example.input_ids[example.prompt_length:]
        assert after.full_ids[0, -len(target):].tolist() == target
        assert after.labels[0, -len(target):].tolist() == example.labels[example.prompt_length:]
        assert set(after.labels[0, :-len(target)].tolist()) == {-100}
        prompt = tokenizer.decode(after.head_input.input_ids[0])
        first_passage = after.head_input.passage_spans[0][0]
        assert example.query in tokenizer.decode(after.head_input.input_ids[0, :first_passage])
        assert prompt.count(example.query) == 2 and after.gold.tolist() == before.gold.tolist()
        start, end = after.head_input.query_span  # the head's query is its last mention, after the corpus
        assert start > after.head_input.passage_spans[-1][1] and example.query in tokenizer.decode(
            after.head_input.input_ids[0, start:end])


def test_a_query_aware_head_is_saved_as_such_and_its_ranker_renders_the_query_aware_prompt(tmp_path):
    """Plumbing (2 steps): the trained head's config says query_aware, so RetrievalHeadRanker scores the prompt
    the head was trained on."""
    import json

    from icr2_components.rankers import RetrievalHeadRanker

    summary = _train(tmp_path, "joint", steps=2, query_aware=True)
    assert json.loads((Path(summary["head"]) / "config.json").read_text())["query_aware"] is True
    ranker = RetrievalHeadRanker(head=str(tmp_path / "out"))
    ranker.warm_up()
    assert ranker._head.config.query_aware is True
