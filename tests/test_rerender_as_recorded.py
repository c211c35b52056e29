"""A committed ``icr2 compare`` report re-rendered from its committed answer cache as written (``bench/results/
ab_retrieval``: 10 pipelines x 200 questions, run before the pipeline YAMLs were edited, so ``--report-only``
finds none of its answers under today's hashes) has the committed report's figures, asking no model. Scored here
with the labels the records were written with (``labels="as_written"``: no question set or passage index is read,
so no tokenizer is loaded); ``bench/rerender_committed.py --check`` re-renders every committed report with the
question set's labels now, as compare scores them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icr2_components.errors import UserInputError
from icr2_components.evaluation.compare.recorded import figure_differences, recorded_dataset, rerender_as_recorded

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
REPORT = REPO / "bench" / "results" / "ab_retrieval" / "report.json"


def test_committed_compare_report_rerenders_with_identical_figures_from_its_cache(tmp_path):
    committed = json.loads(REPORT.read_text(encoding="utf-8"))
    done = rerender_as_recorded(REPORT, tmp_path, repo=REPO, labels="as_written")

    assert done.asked == 0
    assert done.answers_read == 2000  # every answer of the 10 pipelines x 200 questions, under the recorded hashes
    assert done.left_out == {}
    assert figure_differences(committed, done.report) == []
    written = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert figure_differences(committed, written) == []
    assert written["run"]["rendered_as_recorded"]["answers_read"] == 2000
    assert (tmp_path / "report.md").read_text(encoding="utf-8").startswith("# icr2 compare")


def test_figure_differences_names_each_changed_figure_and_skips_run_time_fields():
    old = {"summary": {"a": {"open": {"answer_match": 0.5, "n": 10}}}, "run": {"seconds": 3}, "files": {"x": "y"}}
    new = {"summary": {"a": {"open": {"answer_match": 0.6, "n": 10, "extra": 1}}}, "run": {"seconds": 9}}

    assert figure_differences(old, new) == ["summary.a.open.answer_match: 0.5 -> 0.6",
                                            "summary.a.open.extra: only in the fresh report"]
    assert figure_differences(old, {**old, "run": {"seconds": 100}}) == []


def test_a_report_that_is_not_a_compare_run_and_a_missing_question_set_are_named(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"summary": {}, "run": {"dataset": "x.jsonl"}}), encoding="utf-8")

    with pytest.raises(UserInputError, match="not an icr2 compare report"):
        rerender_as_recorded(report, None)
    with pytest.raises(UserInputError, match=r"no-such-questions\.jsonl is not there"):
        recorded_dataset(str(tmp_path / "no-such-questions.jsonl"))
