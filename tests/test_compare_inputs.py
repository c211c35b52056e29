"""Bad input to compare and the context-type construction, on the real bundled NQ sample (no generation)."""

import json
from pathlib import Path

import pytest
import yaml

from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import cache_lines
from icr2_components.evaluation.metrics.text_metrics import exact_match, rouge_l, token_f1
from icr2_components.kilt.context_types import answer_type, build_context_set
from icr2_components.kilt.questions import answer_pool, read_compare_questions
from icr2_components.pipeline_loading import PipelineLoadError
from icr2_components.pipeline_spec import PipelineSpec, PipelineSpecError

CLOSED_BOOK = "pipelines/closed_book.yaml"


def _write_variant(tmp_path, name, change):
    data = yaml.safe_load(Path(CLOSED_BOOK).read_text())
    change(data)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.unit
def test_module_outside_the_allowlist_is_refused(tmp_path, capsys):
    path = _write_variant(tmp_path, "evil.yaml", lambda d: d["components"]["reader"].update(type="os.system"))
    with pytest.raises(PipelineLoadError, match=r"allowlist|icr2_components"):
        PipelineSpec.from_file(str(path))
    assert main(["compare", "--pipelines", str(path), "--limit", "1", "--out", str(tmp_path / "o")]) == 1
    assert "icr2_components" in capsys.readouterr().err


@pytest.mark.unit
def test_pipeline_without_declared_inputs_is_refused(tmp_path, capsys):
    path = _write_variant(tmp_path, "no_inputs.yaml", lambda d: d.pop("inputs"))
    with pytest.raises(PipelineSpecError, match="declares no `inputs`"):
        PipelineSpec.from_file(str(path))
    assert main(["compare", "--pipelines", str(path), "--out", str(tmp_path / "o")]) == 1
    assert "declares no `inputs`" in capsys.readouterr().err


@pytest.mark.unit
def test_declared_input_must_be_an_open_socket(tmp_path):
    path = _write_variant(tmp_path, "bad_target.yaml", lambda d: d.update(inputs={"query": "reader.messages"}))
    with pytest.raises(PipelineSpecError, match="open input socket"):
        PipelineSpec.from_file(str(path))


def test_dataset_with_missing_answers_is_counted(tmp_path, sample_files):
    lines = [json.loads(line) for line in Path(sample_files.tasks).read_text().splitlines()[:6]]
    for record in lines[:2]:
        record["output"] = [{"provenance": o.get("provenance", [])} for o in record["output"]]
    path = tmp_path / "nq-missing.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n{not json\n")
    questions, skips, _ = read_compare_questions(str(path))
    assert len(questions) == 4
    assert skips.counts["missing answers"] == 2
    assert skips.total == 3  # and the malformed line


def test_context_types_on_real_questions(sample_files):
    questions, _, path = read_compare_questions(None, limit=8)
    pool = answer_pool(path)
    built = 0
    for q in questions:
        contexts = build_context_set(q.id, q.answers, q.gold_documents, q.irrelevant_candidates, pool)
        if contexts.conflicting:
            built += 1
            text = contexts.conflicting[0].content.lower()
            assert contexts.conflicting_answer.lower() in text
            assert answer_type(contexts.conflicting_answer) == answer_type(q.answers[0])
            assert contexts.conflicting[0].meta["replaced_answer"].lower() not in text
        if contexts.irrelevant:
            text = contexts.irrelevant[0].content.lower()
            assert not any(a.lower() in text for a in q.answers)
            assert contexts.irrelevant[0].id not in {d.id for d in q.gold_documents}
        else:
            assert "irrelevant" in contexts.reasons
    assert built >= 4


@pytest.mark.unit
def test_text_metrics_follow_squad_and_rouge_l():
    assert exact_match("The Eiffel Tower.", ["eiffel tower"])
    assert not exact_match("the tall Eiffel Tower", ["eiffel tower"])
    assert token_f1("the tall Eiffel Tower", ["eiffel tower"]) == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
    assert rouge_l("tower eiffel", ["eiffel tower"]) == pytest.approx(0.5)
    assert token_f1("anything", []) == 0.0


def test_over_long_prompt_is_recorded_as_an_error_and_a_bug_stops_the_run(tmp_path, monkeypatch, sample_files):
    """The real failure first: a question whose prompt is over SmolLM2's context makes the real reader raise
    ContextTooLongError (wrapped by Haystack in PipelineRuntimeError); compare records it as that question's error
    and answers the next one. Then a bug (any other error) stops the run: that one can only be injected."""
    from haystack.core.errors import PipelineRuntimeError

    from icr2_components.evaluation.compare.run import run_compare

    dataset = tmp_path / "long.jsonl"
    long_question = " ".join(f"word{i}" for i in range(9000))  # far over 8,192 tokens
    dataset.write_text("\n".join(json.dumps(r) for r in (
        {"id": "long-1", "input": long_question, "output": [{"answer": "nothing"}]},
        {"id": "short-1", "input": "what is the capital of france", "output": [{"answer": "Paris"}]},
    )) + "\n")
    report = run_compare([CLOSED_BOOK], dataset=str(dataset), context_types="open", out_dir=tmp_path / "o",
                         max_new_tokens=4, progress=False)
    assert report["run"]["counters"]["errors"] == 1 and report["run"]["counters"]["model_runs"] == 1
    assert report["summary"]["closed_book"]["open"]["errors"] == 1
    saved = {
        json.loads(line)["question_id"]: json.loads(line)
        for line in cache_lines(tmp_path / "o" / "answers.jsonl.gz")
    }
    assert (
        saved["long-1"]["error"].startswith("The prompt has ")
        and "smollm2-135m-instruct accepts" in saved["long-1"]["error"]
    )
    assert saved["long-1"]["gold_position"] is None and not saved["short-1"].get("error")

    def bug(self, *args, **kwargs):
        try:
            raise RuntimeError("a bug in a component")
        except Exception as error:
            raise PipelineRuntimeError.from_exception("reader", object, error) from error

    monkeypatch.setattr(PipelineSpec, "run", bug)
    with pytest.raises(PipelineRuntimeError):
        run_compare([CLOSED_BOOK], limit=1, context_types="open", out_dir=tmp_path / "o2", progress=False)


@pytest.mark.unit
def test_the_cache_key_hash_follows_behaviour_not_comments_or_descriptive_metadata(tmp_path):
    """Documenting a pipeline (a comment, metadata.baseline) keeps compare's cached answers; changing what it does
    (top_k, or what a controlled context replaces) does not."""
    from icr2_components.pipeline_spec import PipelineSpec

    original = Path("pipelines/vanilla_rag.yaml").read_text()
    documented = tmp_path / "documented.yaml"
    documented.write_text("# a new comment\n" + original.replace("metadata:\n", "metadata:\n  baseline: closed_book\n"))
    changed_k = tmp_path / "changed_k.yaml"
    changed_k.write_text(original.replace("top_k: 3", "top_k: 4").replace("top_k: 5", "top_k: 4"))
    changed_entry = tmp_path / "changed_entry.yaml"
    changed_entry.write_text(original.replace("context_input: prompt.documents", "context_input: retriever.query"))
    base = PipelineSpec.from_file("pipelines/vanilla_rag.yaml").hash
    assert PipelineSpec.from_file(str(documented)).hash == base
    assert PipelineSpec.from_file(str(changed_k)).hash != base
    assert PipelineSpec.from_file(str(changed_entry)).hash != base
