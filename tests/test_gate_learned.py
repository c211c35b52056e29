"""Gates that pay off: need labels from the real SmolLM2, a calibrated threshold, learned gates (logistic,
knn) loaded from YAML, the trade-off evaluation, and the dev/test discipline that keeps training off evaluation.

The labels come from real SmolLM2 answers on a handful of questions with short contexts: NQ-sample questions at
positions 100-103 (outside every held-out and probed range, bench/data/make_heldout_ids.py) with their gold
passage, and bench-set questions (new-world ones with their one-sentence context, answerable ones with a
one-sentence context written here). Tests named ``plumbing`` check arithmetic on hand-made labels.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from icr2_components.cli import main
from icr2_components.evaluation.gates.gate_tradeoff import auroc_interval, compare_methods, pick_cut, tradeoff_curve
from icr2_components.evaluation.gates.need_labels import (
    LabelledQuestion,
    needs_retrieval,
    outcome_of,
    read_labels,
    retrievalqa_question_id,
)
from icr2_components.evaluation.gates.retrieval_decisions import retrieval_auroc
from icr2_components.evaluation.metrics.answer_match import answer_match

ROOT = Path(__file__).resolve().parents[1]
BENCH_SET = ROOT / "bench" / "data" / "gate_eval.jsonl"
HELD_OUT = ROOT / "bench" / "data" / "heldout_nq_ids.txt"
CONTEXTS = {"What is the capital of France?": "Paris is the capital and largest city of France.",
            "How many legs does a spider have?": "A spider has eight legs.",
            "Who wrote Romeo and Juliet?": "Romeo and Juliet is a tragedy written by William Shakespeare."}


# ------------------------------------------------------------------------------------------- plumbing


def _labelled(outcomes: list[str]) -> list[LabelledQuestion]:
    flags = {"context_only": (False, True), "both_right": (True, True), "closed_book_only": (True, False),
             "both_wrong": (False, False)}
    return [LabelledQuestion(f"q{i}", f"question {i}", "s", *flags[o], o, needs_retrieval(o), "reader")
            for i, o in enumerate(outcomes)]


@pytest.mark.unit
def test_plumbing_outcomes_and_labels_of_the_four_cases():
    assert outcome_of(False, True) == "context_only" and needs_retrieval("context_only") is True
    assert outcome_of(True, True) == "both_right" and needs_retrieval("both_right") is False
    assert outcome_of(True, False) == "closed_book_only" and needs_retrieval("closed_book_only") is False
    assert outcome_of(False, False) == "both_wrong" and needs_retrieval("both_wrong") is False
    assert needs_retrieval("both_wrong", "exclude") is None
    with pytest.raises(ValueError, match="--both-wrong takes one of"):
        needs_retrieval("both_wrong", "maybe")


@pytest.mark.unit
def test_plumbing_tradeoff_curve_and_cut_worked_by_hand():
    labelled = _labelled(["context_only", "context_only", "both_right", "closed_book_only", "both_wrong"])
    scores = [0.9, 0.7, 0.6, 0.3, 0.1]
    curve = tradeoff_curve(scores, labelled, cost=0.1)
    # never: match = closed-book right on both_right, closed_book_only = 2/5
    assert curve[0]["retrieval_rate"] == 0.0 and curve[0]["answer_match"] == pytest.approx(0.4)
    by_cut = {round(p["cut"], 2): p for p in curve[1:]}
    # retrieve the top two (both context_only): match 4/5, rate 2/5, objective 0.8 - 0.04
    assert by_cut[0.7]["answer_match"] == pytest.approx(0.8) and by_cut[0.7]["objective"] == pytest.approx(0.76)
    # retrieve all: closed_book_only loses its answer: match 3/5, objective 0.6 - 0.1
    assert by_cut[0.1]["answer_match"] == pytest.approx(0.6) and by_cut[0.1]["objective"] == pytest.approx(0.5)
    picked = pick_cut(scores, labelled, cost=0.1)
    assert picked["score_cut"] == pytest.approx(0.7) and picked["cut"] == pytest.approx(0.65)  # midway to 0.6
    # cost 0: retrieving both_right costs nothing, so the tie at 0.8 goes to the lower retrieval rate
    assert pick_cut(scores, labelled, cost=0.0)["retrieval_rate"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="must be in \\[0, 1\\]"):
        tradeoff_curve(scores, labelled, cost=2)


@pytest.mark.unit
def test_plumbing_auroc_interval_and_paired_tests_against_always():
    labelled = _labelled(["context_only", "both_wrong", "context_only", "both_right", "closed_book_only",
                          "context_only", "both_wrong", "both_right"])
    scores = [0.9, 0.2, 0.8, 0.4, 0.35, 0.3, 0.5, 0.1]
    labels = [q.needs_retrieval for q in labelled]
    result = auroc_interval(scores, labels, seed=0)
    assert result["mean"] == pytest.approx(retrieval_auroc(scores, labels))
    assert result["method"].startswith("bootstrap") and result["ci95"][0] <= result["mean"] <= result["ci95"][1]
    methods = {"always": {"decisions": [True] * 8, "scores": None},
               "never": {"decisions": [False] * 8, "scores": None},
               "scored": {"decisions": [s >= 0.6 for s in scores], "scores": scores}}
    report = compare_methods(methods, labelled, cost=0.1, seed=0)
    always, never = report["methods"]["always"], report["methods"]["never"]
    assert always["answer_match"]["mean"] == pytest.approx(5 / 8) and always["retrieval_rate"]["mean"] == 1.0
    assert never["answer_match"]["mean"] == pytest.approx(3 / 8)
    assert always["objective"]["mean"] == pytest.approx(5 / 8 - 0.1)
    # never vs always on answer match: 3 context_only questions only always gets, 1 closed_book_only only never gets
    versus = never["vs_always"]["answer_match"]
    assert (versus["only_pipeline"], versus["only_baseline"]) == (1, 3) and versus["test"] == "exact McNemar"
    assert "p_holm" in versus and report["methods"]["scored"]["curve"][0]["retrieval_rate"] == 0.0


# ------------------------------------------------------------------------------------- real SmolLM2 labels


def _bench_subset(tmp_path: Path, name: str, questions: list[dict]) -> Path:
    """Bench-set lines under the bench set's own file name (question ids are '<stem>:<hash>')."""
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "gate_eval.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in questions))
    return path


@pytest.fixture(scope="module")
def label_files(tmp_path_factory, smollm2, minilm):
    """Two disjoint label files from real SmolLM2 answers: train (NQ 100-101 + 2 new-world + 1 answerable) and
    evaluation (NQ 102-103 + 2 new-world + 2 answerable)."""
    tmp = tmp_path_factory.mktemp("labels")
    rows = [json.loads(line) for line in BENCH_SET.read_text().splitlines() if line.strip()]
    new_world = [r for r in rows if r["data_source"] == "new_world"]
    answerable = [r for r in rows if r["question"] in CONTEXTS]
    for row in answerable:
        row["context"] = [CONTEXTS[row["question"]]]
    files = {}
    for name, nq_range, questions in (("train", "100:102", new_world[:2] + answerable[:1]),
                                      ("eval", "102:104", new_world[2:4] + answerable[1:3])):
        subset = _bench_subset(tmp, name, questions)
        out = tmp / f"{name}.jsonl"
        code = main(["label-retrieval-need", "--out", str(out), "--nq-range", nq_range, "--retrievalqa", str(subset),
                     "--exclude-ids", str(HELD_OUT), "--max-new-tokens", "20", "--device", "cpu", "--no-progress"])
        assert code == 0
        files[name] = (out, subset)
    return files


def test_labels_record_both_real_answers_and_the_outcome(label_files):
    out, subset = label_files["train"]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 5
    ids = [r["id"] for r in records]
    assert ids[:2] == ["nq-sample-00100", "nq-sample-00101"]
    bench = [json.loads(line) for line in subset.read_text().splitlines()]
    assert ids[2:] == [retrievalqa_question_id(BENCH_SET, q["question"]) for q in bench]
    for record in records:
        assert record["reader"] == "local:smollm2-135m-instruct:max_new_tokens=20"
        assert record["closed_book_answer"] and record["context_answer"]  # real replies, not empty
        assert record["closed_book_match"] == answer_match(record["closed_book_answer"], record["answers"])
        assert record["context_match"] == answer_match(record["context_answer"], record["answers"])
        assert record["outcome"] == outcome_of(record["closed_book_match"], record["context_match"])
        assert record["passages"] and len(" ".join(record["passages"]).split()) < 250  # short contexts
    counts = json.loads(Path(f"{out}.counts.json").read_text())
    assert counts["counts"]["all"]["questions"] == 5
    assert (
        sum(counts["counts"]["all"][o] for o in ("context_only", "both_right", "closed_book_only", "both_wrong")) == 5
    )
    labelled, described = read_labels([out])
    assert described["reader"] == records[0]["reader"] and len(labelled) == 5


def test_labelling_resumes_from_its_own_file(label_files, capsys):
    out, subset = label_files["train"]
    before = out.read_text()
    code = main(["label-retrieval-need", "--out", str(out), "--nq-range", "100:102", "--retrievalqa", str(subset),
                 "--max-new-tokens", "20", "--device", "cpu", "--no-progress"])
    assert code == 0
    assert out.read_text() == before  # nothing answered again
    assert json.loads(Path(f"{out}.counts.json").read_text())["cached"] == 5


def test_labels_of_two_readers_are_not_mixed(label_files, tmp_path):
    out, _ = label_files["train"]
    other = tmp_path / "other.jsonl"
    line = json.loads(out.read_text().splitlines()[0])
    line.update(id="nq-sample-00900", key="x|nq-sample-00900|gold:0", reader="served:bigger@http://h/v1")
    other.write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="mix readers"):
        read_labels([out, other])


def test_train_gate_refuses_labels_that_overlap_a_held_out_file(label_files, tmp_path, capsys):
    out, _ = label_files["train"]
    held = tmp_path / "held.txt"
    held.write_text("nq-sample-00101\nnq-sample-09999\n")
    code = main(["train-gate", str(out), "--kind", "knn", "--out", str(tmp_path / "g.json"), "--held-out", str(held),
                 "--no-progress"])
    assert code == 1
    error = capsys.readouterr().err
    assert "1 labelled question(s) are held out" in error and "nq-sample-00101" in error
    assert not (tmp_path / "g.json").exists()


def test_calibrated_threshold_is_read_by_the_threshold_gate(label_files, tmp_path, smollm2):
    from icr2_components.artifacts.gate_artifact import GateArtifact
    from icr2_components.gates import TimeAwareRetrievalGate

    out, _ = label_files["train"]
    artifact_path = tmp_path / "threshold.json"
    assert main(["train-gate", str(out), "--kind", "threshold", "--cost", "0.1", "--out", str(artifact_path),
                 "--no-progress", "--device", "cpu"]) == 0
    artifact = GateArtifact.load(artifact_path)
    assert artifact.kind == "threshold" and sorted(artifact.probed_ids) == sorted(r.id for r in read_labels([out])[0])
    assert artifact.objective["cost"] == 0.1 and artifact.objective["questions"] == 5
    gate = TimeAwareRetrievalGate(method="threshold", artifact=str(artifact_path),
                                  model_settings={"dtype": "float32", "device": "cpu"})
    gate.warm_up()
    decision = gate.run(query="Who won the 2025 Eurovision Song Contest?")["decision"]
    assert decision["threshold"] == pytest.approx(artifact.cut)
    assert decision["retrieve"] == (decision["p_yes"] >= artifact.cut)
    assert gate.run(query="Who won the 2025 Eurovision Song Contest?", threshold=0.0)["decision"]["retrieve"] is True


@pytest.mark.parametrize("kind", ["logistic", "knn"])
def test_learned_gate_trains_loads_from_yaml_and_decides(label_files, tmp_path, kind, minilm):
    from icr2_components.artifacts.gate_artifact import GateArtifact
    from icr2_components.gates.deciders.learned import LearnedGateModel
    from icr2_components.pipeline_loading import loads_pipeline

    train, _ = label_files["train"]
    labelled, _ = read_labels([train])
    positives = sum(bool(q.needs_retrieval) for q in labelled)
    if positives < 2 or positives > len(labelled) - 2:
        pytest.fail(f"SmolLM2's labels on the training questions have {positives} of {len(labelled)} needing "
                    "retrieval; the test needs both classes twice (choose other questions)")
    artifact_path = tmp_path / f"{kind}.json"
    assert main(["train-gate", str(train), "--kind", kind, "--out", str(artifact_path), "--folds", "2",
                 "--knn-k", "3", "--no-progress", "--device", "cpu"]) == 0
    artifact = GateArtifact.load(artifact_path)
    text = json.loads(artifact_path.read_text())
    assert text["format"] == "icr2-gate/1" and "probed_ids" in text  # JSON, no pickle
    if kind == "knn":
        with np.load(artifact.vectors_path(artifact_path), allow_pickle=False) as data:
            assert data["vectors"].shape == (5, 384)
    yaml_text = f"""
components:
  gate:
    type: icr2_components.gates.time_aware_retrieval_gate.TimeAwareRetrievalGate
    init_parameters: {{method: learned, model: null, artifact: {artifact_path}, model_settings: {{device: cpu}}}}
connections: []
"""
    pipeline = loads_pipeline(yaml_text)
    assert loads_pipeline(pipeline.dumps()).get_component("gate").parameters_of().artifact == str(
        artifact_path
    )  # round trip
    question = "Who became Prime Minister of Canada in March 2025?"
    decision = pipeline.run({"gate": {"query": question}})["gate"]["decision"]
    expected = float(LearnedGateModel(str(artifact_path), device="cpu").probabilities([question])[0])
    assert decision["scoring"] == "learned" and decision["p_yes"] == pytest.approx(expected)
    assert decision["retrieve"] == (expected >= artifact.cut)


def test_eval_gate_compares_methods_on_held_apart_labels_and_refuses_training_questions(label_files, tmp_path, capsys):
    train, _ = label_files["train"]
    evaluation, _ = label_files["eval"]
    artifact_path = tmp_path / "threshold.json"
    assert main(["train-gate", str(train), "--kind", "threshold", "--out", str(artifact_path), "--no-progress",
                 "--device", "cpu"]) == 0
    out_dir = tmp_path / "report"
    code = main(["eval-gate", "--labels", str(evaluation), "--methods",
                 f"always,never,vanilla,ta_are,threshold={artifact_path}", "--cost", "0.1", "--today", "2025-12-01",
                 "--device", "cpu", "--out-dir", str(out_dir), "--claim", "threshold:threshold"])
    assert code == 0
    report = json.loads((out_dir / "tradeoff.json").read_text())
    # the pre-named claim: one part per (reference, metric), holding only if every part does
    claim = report["claim"]
    assert claim["method"] == "threshold:threshold" and len(claim["parts"]) == 4
    assert claim["holds"] == all(part["holds"] for part in claim["parts"])
    assert (out_dir / "tradeoff.png").stat().st_size > 0 and "## vanilla" in (out_dir / "curves.md").read_text()
    assert (out_dir / "explore.html").is_file() and (out_dir / "plotly.min.js").is_file()  # the interactive page
    methods = report["all"]["methods"]
    assert set(methods) == {"always", "never", "vanilla", "ta_are", "threshold:threshold"}
    labelled, _ = read_labels([evaluation])
    n = len(labelled)
    assert report["all"]["questions"] == n == 6  # NQ 102-103, 2 new-world, 2 answerable
    always_match = sum(q.context_match for q in labelled) / n
    assert methods["always"]["answer_match"]["mean"] == pytest.approx(always_match)
    for name, entry in methods.items():
        retrieve = [row[f"{name} retrieve"] for row in report["rows"]]
        by_id = {q.id: q for q in labelled}
        match = [by_id[row["id"]].context_match if r else by_id[row["id"]].closed_book_match
                 for row, r in zip(report["rows"], retrieve, strict=True)]
        assert entry["answer_match"]["mean"] == pytest.approx(sum(match) / n)
        assert entry["objective"]["mean"] == pytest.approx(sum(match) / n - 0.1 * sum(retrieve) / n)
        if name != "always":
            assert entry["vs_always"]["objective"]["test"] == "sign-flip permutation"
    assert methods["vanilla"]["curve"] and methods["always"]["auroc"] is None
    printed = " ".join(capsys.readouterr().out.split())
    assert "6 labelled questions" in printed and "threshold:threshold" in printed and "baseline" in printed
    assert "claim (intersection-union" in printed
    # a claim needs both references among the methods
    assert main(["eval-gate", "--labels", str(evaluation), "--methods", f"always,vanilla,threshold={artifact_path}",
                 "--claim", "threshold:threshold", "--device", "cpu"]) == 1
    assert "add ['ta_are'] to --methods" in capsys.readouterr().err
    # the artifact's training questions cannot be evaluated on
    code = main(["eval-gate", "--labels", str(train), "--methods", f"always,threshold={artifact_path}",
                 "--device", "cpu"])
    assert code == 1
    assert "were used to train or calibrate" in capsys.readouterr().err


@pytest.mark.unit
def test_plumbing_held_out_ids_are_left_out_of_a_labelling_range_and_counted(sample_files):
    from icr2_components.evaluation.compare.splits import read_question_ids
    from icr2_components.evaluation.gates.need_labels import nq_question_ids
    from icr2_components.kilt.questions import dataset_question_ids

    available, _, _ = dataset_question_ids(None)
    held = set(read_question_ids(HELD_OUT))
    window = available[990:1060]
    expected = [i for i in window if i not in held]
    assert len(expected) < len(window)  # the window reaches into the held-out pool (positions >= 1000)
    ids, described = nq_question_ids(ranges=["990:1060"], exclude_files=[str(HELD_OUT)])
    assert ids == expected and not held & set(ids)
    assert described["excluded_held_out"] == len(window) - len(expected) and described["ids"] == len(expected)
    with pytest.raises(ValueError, match="START:END"):
        nq_question_ids(ranges=["10-20"])


def test_plumbing_gate_artifact_refusals_are_one_line(tmp_path):
    from icr2_components.artifacts.gate_artifact import GateArtifact, load_gate_artifact
    from icr2_components.gates import TimeAwareRetrievalGate

    with pytest.raises(FileNotFoundError, match="icr2 train-gate"):
        GateArtifact.load(tmp_path / "missing.json")
    path = GateArtifact(kind="threshold", cut=0.4, objective={}, probed_ids=["q1"]).save(tmp_path / "t.json")
    with pytest.raises(ValueError, match="method 'learned' reads logistic or knn"):
        load_gate_artifact(path, ("logistic", "knn"), "learned")
    with pytest.raises(ValueError, match="needs artifact="):
        TimeAwareRetrievalGate(method="learned", model=None)
    with pytest.raises(ValueError, match="Gate artifact not found"):
        TimeAwareRetrievalGate(method="learned", model=None, artifact=str(tmp_path / "none.json"))
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"format": "icr2-gate/1", "kind": "logistic", "cut": 0.5, "objective": {},
                                  "probed_ids": [], "embedding_model": "all-minilm-l6-v2", "weights": [1.0]}))
    with pytest.raises(ValueError, match="one weight per feature"):
        GateArtifact.load(broken)


@pytest.mark.llama_server
def test_labels_and_gate_scores_through_a_served_reader(llama_server_url, llama_model_alias, tmp_path):
    """The same commands with the reader and the asking gate behind llama.cpp's OpenAI-compatible server."""
    backend = tmp_path / "served.yaml"
    backend.write_text(
        f"kind: served\nserved_model:\n  api_base_url: {llama_server_url}\n  model: {llama_model_alias}\n"
        "  timeout_s: 120\n  max_retries: 1\n"
    )
    rows = [json.loads(line) for line in BENCH_SET.read_text().splitlines() if line.strip()]
    answerable = next(r for r in rows if r["question"] == "What is the capital of France?")
    answerable["context"] = [CONTEXTS[answerable["question"]]]
    subset = _bench_subset(tmp_path, "served", [*[r for r in rows if r["data_source"] == "new_world"][:2], answerable])
    out = tmp_path / "served_labels.jsonl"
    assert main(["label-retrieval-need", "--out", str(out), "--retrievalqa", str(subset), "--backend", str(backend),
                 "--index", "none", "--max-new-tokens", "20", "--no-progress"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 3
    for record in records:
        assert record["reader"].startswith(f"served:{llama_model_alias}@{llama_server_url}")
        assert record["closed_book_match"] == answer_match(record["closed_book_answer"], record["answers"])
        assert record["context_match"] == answer_match(record["context_answer"], record["answers"])
    out_dir = tmp_path / "report"
    assert main(["eval-gate", "--labels", str(out), "--methods", "always,vanilla", "--backend", str(backend),
                 "--out-dir", str(out_dir)]) == 0
    report = json.loads((out_dir / "tradeoff.json").read_text())
    assert report["methods"]["vanilla"]["stats"]["decisions"] == 3
    scores = [row["vanilla score"] for row in report["rows"]]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert [row["vanilla retrieve"] for row in report["rows"]] == [s >= 0.5 for s in scores]


def test_compare_keeps_a_gates_training_questions_out(tmp_path, sample_files):
    """A pipeline whose gate reads an artifact (`artifact:`) is not evaluated on the questions it was trained on:
    compare leaves them out of a run that chooses its questions, and refuses a question-id file listing them."""
    import yaml

    from icr2_components.artifacts.gate_artifact import GateArtifact
    from icr2_components.evaluation.compare.held_out import HeldOutError, select_questions
    from icr2_components.pipeline_spec import PipelineSpec

    trained = ["nq-sample-00001", "nq-sample-00003"]
    artifact = GateArtifact(kind="threshold", cut=0.4, objective={}, probed_ids=trained).save(tmp_path / "gate.json")
    data = yaml.safe_load((ROOT / "pipelines" / "adaptive_rag.yaml").read_text())
    data["components"]["gate"]["init_parameters"].update(
        method="threshold", model="smollm2-135m-instruct", artifact=str(artifact)
    )
    data["components"]["retriever"]["init_parameters"]["index"] = str(ROOT / "indexing" / "kilt-sample.yaml")
    path = tmp_path / "adaptive_calibrated.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    spec = PipelineSpec.from_file(str(path))
    selection = select_questions([spec], limit=5)
    assert not set(trained) & set(selection.ids) and len(selection.ids) == 5
    assert selection.describe()["held_out"]["excluded_probed"] == 2
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("nq-sample-00000\nnq-sample-00003\n")
    with pytest.raises(HeldOutError, match="probed on"):
        select_questions([spec], question_ids=str(ids_file))


def test_need_features_read_the_index_signals_of_real_questions(sample_files, minilm):
    from icr2_components.gates.need_features import NeedFeatures, check_signals, feature_names
    from icr2_components.stores import open_index

    signals = ["date_words", "top_score", "top_dense_score"]
    with pytest.raises(ValueError, match="top_score, top_dense_score signal\\(s\\) need an index config"):
        check_signals(signals, None)
    index = open_index("indexing/kilt-sample.yaml")
    passage = next(iter(sorted(index.document_store.storage.values(), key=lambda d: d.id)))
    on_topic = f"What is {passage.meta['title']}?"
    features = NeedFeatures("all-minilm-l6-v2", signals=signals, index="indexing/kilt-sample.yaml", device="cpu")
    matrix = features.matrix([on_topic, "qwzx vbnm plok in 2025"])
    assert matrix.shape == (2, len(feature_names(384, signals))) == (2, 389)
    date_words, names_year, bm25, dense, margin = matrix[:, -5:].T
    assert list(names_year) == [0.0, 1.0] and date_words[1] >= 1
    assert bm25[0] > bm25[1] and dense[0] > dense[1]       # the index covers the on-topic question better
    assert all(0.0 < d <= 1.0 for d in dense) and all(m >= 0.0 for m in margin)
    # the gate's own embedding stands in for the index's (same model, fp32): the same top score as a fresh search
    assert index.embeds_queries_like("all-minilm-l6-v2") and not index.embeds_queries_like("another-model")
    again = index.retrieve(on_topic, method="dense", top_k=1)[0].score
    assert dense[0] == pytest.approx(again, abs=1e-5)
