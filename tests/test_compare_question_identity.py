"""An answer's identity is what decides it, and a question set's gold labels are not part of it.

``icr2 compare`` keys an answer by pipeline hash, question id and context type and checks the inputs each record
stores (the question's text, the passages' ``context_sha``, the answer budget) against the run's own. Edit a question
set's gold answers keeping its ids and re-run into the same ``--out``: nothing is asked again and the report scores
the new gold, naming the new file's SHA-256. Reword one question: only it is asked again. The model is the bundled
SmolLM2 in process (closed-book, 3 questions, 4 new tokens).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import (
    LABEL_FIELDS,
    STALE,
    read_answer_records,
    reuse_decision,
    with_labels,
)
from icr2_components.evaluation.compare.run import run_compare
from icr2_components.evaluation.metrics.text_metrics import answer_match
from icr2_components.kilt.question_sets import QuestionSet
from icr2_components.readers.local_chat_reader import LocalChatReader
from icr2_components.text.normalization import normalize_answer

QUESTIONS = [
    {"id": "q1", "question": "What is the capital of France?", "answers": ["Paris"]},
    {"id": "q2", "question": "Who wrote Hamlet?", "answers": ["William Shakespeare"]},
    {"id": "q3", "question": "What is the largest planet in the solar system?", "answers": ["Jupiter"]},
]
SETTINGS = {"context_types": "open", "max_new_tokens": 4, "progress": False}


def write_set(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def asked(monkeypatch):
    """The questions the reader was asked, in order (every LocalChatReader.run, by its prompt's text)."""
    prompts: list[str] = []
    original = LocalChatReader.run

    @functools.wraps(original)  # Haystack reads the sockets from run's signature
    def counting(self, *args, **kwargs):
        prompts.append(json.dumps([str(a) for a in args] + [str(v) for v in kwargs.values()]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LocalChatReader, "run", counting)
    return prompts


def test_edited_gold_answers_rescore_cached_answers_without_asking_the_model(tmp_path, smollm2, asked):
    data, out = tmp_path / "questions.jsonl", tmp_path / "run"
    write_set(data, QUESTIONS)
    first = run_compare(["pipelines/closed_book.yaml"], dataset=str(data), out_dir=out, **SETTINGS)
    assert first["run"]["counters"]["model_runs"] == 3 and len(asked) == 3
    cache = out / "answers.jsonl.gz"
    written = cache.read_bytes()
    answers = {r["question_id"]: r["answer"] for r in read_answer_records(cache)}
    assert all(normalize_answer(a) for a in answers.values())  # 4 tokens always say something
    # the new gold: q1's gold becomes exactly what the model said (a match), q2's and q3's a string it did not say
    edited = [dict(QUESTIONS[0], answers=[answers["q1"]]), dict(QUESTIONS[1], answers=["zzzz never said"]),
              dict(QUESTIONS[2], answers=["yyyy never said either"])]
    write_set(data, edited)
    asked.clear()
    second = run_compare(["pipelines/closed_book.yaml"], dataset=str(data), out_dir=out, **SETTINGS)
    counters = second["run"]["counters"]
    assert len(asked) == 0 and counters["model_runs"] == 0 and counters["cached"] == 3
    assert counters["labels_changed"] == 3
    assert cache.read_bytes() == written  # not one answer written: the records stand as they were
    expected = sum(answer_match(answers[row["id"]], row["answers"]) for row in edited) / 3
    assert expected == pytest.approx(1 / 3)
    assert second["summary"]["closed_book"]["open"]["answer_match"] == pytest.approx(expected)
    # the report names the question set it scored with: the edited file's path and SHA-256 (of its data and
    # reading, QuestionSet.sha256), in every format
    report = json.loads((out / "report.json").read_text())
    sha = report["run"]["dataset_sha256"]
    assert sha == QuestionSet.from_options(data).sha256() != first["run"]["dataset_sha256"]
    assert report["run"]["dataset"] == str(data)
    for name in ("report.md", "report.html"):
        text = (out / name).read_text()
        assert sha in text and str(data) in text and "3 cached answer(s) written with other labels" in text
    # a report-only run scores the same way: with the gold of the file now
    asked.clear()
    assert main(["compare", "--pipelines", "pipelines/closed_book.yaml", "--dataset", str(data), "--context-types",
                 "open", "--max-new-tokens", "4", "--out", str(out), "--no-progress", "--report-only"]) == 0
    assert len(asked) == 0
    assert json.loads((out / "report.json").read_text())["summary"]["closed_book"]["open"]["answer_match"] == (
        pytest.approx(expected))


def test_a_reworded_question_alone_is_asked_again(tmp_path, smollm2, asked, capsys):
    data, out = tmp_path / "questions.jsonl", tmp_path / "run"
    write_set(data, QUESTIONS)
    run_compare(["pipelines/closed_book.yaml"], dataset=str(data), out_dir=out, **SETTINGS)
    before = {r["question_id"]: r for r in read_answer_records(out / "answers.jsonl")}
    reworded = [QUESTIONS[0], dict(QUESTIONS[1], question="Which playwright wrote Hamlet?"), QUESTIONS[2]]
    write_set(data, reworded)
    asked.clear()
    again = run_compare(["pipelines/closed_book.yaml"], dataset=str(data), out_dir=out, **SETTINGS)
    counters = again["run"]["counters"]
    assert (counters["model_runs"], counters["cached"], counters["stale_question"]) == (1, 2, 1)
    assert len(asked) == 1 and "Which playwright wrote Hamlet?" in asked[0]
    after = {r["question_id"]: r for r in read_answer_records(out / "answers.jsonl")}
    assert after["q2"]["query"] == "Which playwright wrote Hamlet?"
    assert after["q2"]["replaces"] == before["q2"]["record_sha"]  # the sealed line says what it replaces
    assert after["q1"] == before["q1"] and after["q3"] == before["q3"]
    # another question set reusing the ids with other questions, into the same --out, with --report-only: the
    # answers to other questions are left out of its report, never scored as its own
    other = [dict(QUESTIONS[0], question="What is the capital of Italy?", answers=["Rome"]), reworded[1],
             reworded[2]]
    write_set(data, other)
    asked.clear()
    assert main(["compare", "--pipelines", "pipelines/closed_book.yaml", "--dataset", str(data), "--context-types",
                 "open", "--max-new-tokens", "4", "--out", str(out), "--no-progress", "--report-only"]) == 0
    assert len(asked) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["counters"]["stale_question"] == 1
    assert report["run"]["report_only"] == {"complete_questions": 2, "incomplete_questions": 1}
    assert report["summary"]["closed_book"]["open"]["n"] == 2
    assert ("1 cached answer(s) were asked another question text than the question set's now (stale_question): "
            "left out of this report") in capsys.readouterr().out


@pytest.mark.unit
def test_reuse_decision_checks_the_question_text_a_record_was_asked():
    record = {"query": "Who wrote Hamlet?", "context_sha": "c1", "max_new_tokens": 4, "answers": ["Shakespeare"]}
    assert reuse_decision(record, "c1", 4, "Who wrote Hamlet?") == "reuse"
    assert reuse_decision(record, "c1", 4, "Which playwright wrote Hamlet?") == "stale_question"
    assert reuse_decision(record, None, 4, "Who wrote Hamlet? ") == "stale_question"  # any change of text
    # the budget is checked first, then the question, then the passages
    assert reuse_decision(record, "c2", 8, "Other?") == "stale_budget"
    assert reuse_decision(record, "c2", 4, "Other?") == "stale_question"
    assert reuse_decision(record, "c2", 4, "Who wrote Hamlet?") == "stale_context"
    # a record holding no question text is reused and counted, as one from before context_sha is
    assert reuse_decision({"context_sha": "c1"}, "c1", question="Who wrote Hamlet?") == "question_unchecked"
    assert reuse_decision({"context_sha": "c1"}, "c1") == "reuse"  # the question not asked about: not checked
    assert reuse_decision({}, "c1", question="Who wrote Hamlet?") == "context_unchecked"
    assert "stale_question" in STALE and "question_unchecked" not in STALE
    # gold labels never decide reuse: the same record with other gold is the same answer
    assert reuse_decision({**record, "answers": ["Marlowe"], "gold_ids": ["x"]}, "c1", 4, "Who wrote Hamlet?") == (
        "reuse")


@pytest.mark.unit
def test_with_labels_replaces_the_labels_and_keeps_the_answer():
    record = {"key": "h|q1|gold", "query": "Who wrote Hamlet?", "answer": "Shakespeare", "shown_ids": ["p1"],
              "answers": ["Marlowe"], "gold_ids": ["p9"], "conflicting_answer": None, "task_type": "qa",
              "record_sha": "0123456789abcdef"}
    labels = {"answers": ["William Shakespeare"], "gold_ids": ["p1"], "conflicting_answer": None,
              "task_type": "qa"}
    relabelled = with_labels(record, labels)
    assert {k: relabelled[k] for k in LABEL_FIELDS} == labels
    assert {k: v for k, v in relabelled.items() if k not in LABEL_FIELDS} == {
        k: v for k, v in record.items() if k not in LABEL_FIELDS}
    assert record["answers"] == ["Marlowe"]  # a copy: the cached record is not touched


@pytest.mark.unit
def test_the_pipeline_hash_covers_the_backend_and_its_model(tmp_path):
    """The backend (its kind, model and URL) is applied to the components before they are hashed, so answers of
    another served model or server are never taken for these."""
    import yaml

    from icr2_components.backends import load_backend
    from icr2_components.pipeline_spec import PipelineSpec

    def served(folder: Path, name: str, model: str, url: str):
        file = folder / f"{name}.yaml"
        file.write_text(yaml.safe_dump({"kind": "served", "served_model": {
            "api_base_url": url, "model": model, "context_length": 8192, "tokenizer": "smollm2-135m-instruct"}}))
        return load_backend(file)

    folder = tmp_path
    local = PipelineSpec.from_file("pipelines/closed_book.yaml").hash
    one = PipelineSpec.from_file("pipelines/closed_book.yaml",
                                 backend=served(folder, "a", "model-a", "http://127.0.0.1:9/v1")).hash
    other_model = PipelineSpec.from_file("pipelines/closed_book.yaml",
                                         backend=served(folder, "b", "model-b", "http://127.0.0.1:9/v1")).hash
    other_server = PipelineSpec.from_file("pipelines/closed_book.yaml",
                                          backend=served(folder, "c", "model-a", "http://127.0.0.1:10/v1")).hash
    assert len({local, one, other_model, other_server}) == 4


def test_the_committed_kv_retrieval_report_renders_again_from_its_cache_with_identical_figures(tmp_path, smollm2):
    """The committed kv-retrieval run's answers (written before answers were checked against their question text
    now) stand for this run's: each record's stored question text is the question's now, so all 800 are reused,
    none asked, and the report's figures are the committed ones (compare's scored records, gold of now)."""
    import shutil

    from icr2_components.evaluation.experiments.runner import run_experiment

    committed_folder = Path(__file__).resolve().parents[1] / "bench" / "results" / "reproduce" / "kv-retrieval"
    (tmp_path / "compare").mkdir()
    shutil.copy(committed_folder / "compare_answers.jsonl.gz", tmp_path / "compare" / "answers.jsonl.gz")
    report = run_experiment("kv-retrieval", out_dir=tmp_path, progress=False)
    counters = report["run"]["counters"]["conditions"]
    assert (counters["model_runs"], counters["cached"]) == (0, 800)
    assert counters["stale_question"] == counters["question_unchecked"] == counters["labels_changed"] == 0
    committed = json.loads((committed_folder / "report.json").read_text())
    for key in ("questions", "cells", "curves", "variants_vs_first", "references", "conditions_vs_references"):
        assert report[key] == committed[key], key
