"""`icr2 compare --report-only`: a long resumable run's partial results, paired, without running a model."""

import json
from pathlib import Path

from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import cache_lines
from icr2_components.evaluation.compare.run import run_compare

PIPELINES = ["pipelines/closed_book.yaml", "pipelines/oracle.yaml"]


def held_out_ids(count):
    lines = Path("bench/data/heldout_nq_ids.txt").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")][:count]


def test_report_only_reports_the_questions_every_pipeline_answered_and_counts_the_rest(tmp_path, smollm2, capsys):
    """Two held-out questions answered for real (2 new tokens), then a report-only run over three: it runs no model,
    reports the two on both pipelines, counts the third as incomplete, and the CLI says so."""
    first_two, three = tmp_path / "two.txt", tmp_path / "three.txt"
    ids = held_out_ids(3)
    first_two.write_text("\n".join(ids[:2]) + "\n")
    three.write_text("\n".join(ids) + "\n")
    out = tmp_path / "run"
    done = run_compare(PIPELINES, context_types="open", question_ids=first_two, out_dir=out, max_new_tokens=2,
                       progress=False)
    assert done["run"]["counters"]["model_runs"] == 4
    partial = run_compare(PIPELINES, context_types="open", question_ids=three, out_dir=out, max_new_tokens=2,
                          progress=False, report_only=True)
    assert partial["run"]["counters"]["model_runs"] == 0
    assert partial["run"]["report_only"] == {"complete_questions": 2, "incomplete_questions": 1}
    assert partial["summary"]["oracle"]["open"]["n"] == 2
    assert partial["summary"]["closed_book"]["open"]["n"] == 2
    assert partial["run"]["generation_seconds"] > 0
    assert json.loads((out / "report.json").read_text())["run"]["report_only"]["incomplete_questions"] == 1
    lines = [json.loads(line) for line in cache_lines(out / "answers.jsonl.gz")]
    assert {r["question_id"] for r in lines} == set(ids[:2])  # nothing was generated for the third

    assert main(["compare", "--pipelines", *PIPELINES, "--context-types", "open", "--question-ids", str(three),
                 "--out", str(out), "--max-new-tokens", "2", "--no-progress", "--report-only"]) == 0
    assert "report only: 2 questions answered by every pipeline reported, 1 not yet" in capsys.readouterr().out


def test_report_only_refuses_tune(tmp_path, capsys):
    code = main(["compare", "--pipelines", "pipelines/cmt_cad.yaml", "--tune", "--report-only", "--out", str(tmp_path)])
    assert code != 0
    assert "--report-only runs no model, and --tune would" in capsys.readouterr().err
