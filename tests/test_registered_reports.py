"""The committed reproduce reports state what they measured: CUB's faithfulness headline is computed on the paired
questions it compares (those given both a gold and a conflicting context), recomputed here from the committed answer
cache apart from the report code; a part of a registered run says it is one, with its size."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from icr2_components.evaluation.experiments import get_experiment
from icr2_components.evaluation.metrics.bcu import bcu

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "reproduce"


def _cub_bcu() -> dict[str, dict[str, dict[str, float]]]:
    """``{pipeline: {context type: {question: BCU}}}`` for gold and conflicting, read from the committed cache:
    gold counts the gold answers in the reply, conflicting the substitute (CUB's BCU)."""
    report = json.loads((RESULTS / "cub" / "report.json").read_text())
    by_hash = {info["hash"]: name for name, info in report["run"]["pipelines"].items()}
    scores: dict[str, dict[str, dict[str, float]]] = {}
    with gzip.open(RESULTS / "cub" / "compare_answers.jsonl.gz", "rt", encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            name = by_hash.get(record["pipeline_hash"])
            kind = record["context_type"]
            if name is None or record.get("error") or kind not in ("gold", "conflicting"):
                continue
            targets = record["answers"] if kind == "gold" else [record["conflicting_answer"]]
            scores.setdefault(name, {}).setdefault(kind, {})[record["question_id"]] = bcu(record["answer"], targets)
    return scores


def test_cubs_faithfulness_is_computed_on_the_questions_given_both_contexts():
    report = json.loads((RESULTS / "cub" / "report.json").read_text())
    scores = _cub_bcu()
    for name, entry in report["techniques"].items():
        gold, conflicting = scores[name]["gold"], scores[name]["conflicting"]
        paired = sorted(set(gold) & set(conflicting))
        assert len(gold) == 100 and len(paired) == 98, name  # 2 questions have no conflicting substitute
        expected = statistics.fmean((gold[q] + conflicting[q]) / 2 for q in paired)
        assert entry["faithfulness"] == pytest.approx(expected), name
        assert entry["intervals"]["faithfulness"]["n"] == 98, name
    # the headline the issue named: ACD's paired faithfulness 0.179 (0.176 mixed 100 gold with 98 conflicting)
    assert round(report["techniques"]["cmt_acd"]["faithfulness"], 3) == 0.179
    assert "| acd | cmt_acd | " in (markdown := (RESULTS / "cub" / "report.md").read_text())
    assert "0.179 [0.13, 0.24] n 98" in markdown and "0.176" not in markdown.split("## each technique")[0]


def test_a_part_of_a_registered_run_says_so_with_its_size():
    experiment = get_experiment("lost-in-the-middle")
    part = {"at_registered_size": False, "limit": None, "conditions_asked": "20docs@*"}
    assert experiment.size_note(part).startswith("a part of the registered run (--conditions '20docs@*', the "
                                                 "registered 200 questions")
    assert experiment.size_note({**part, "limit": 50}).startswith("NOT at the registered size (200 questions")
    assert experiment.size_note({**part, "conditions_asked": "20docs@1"}).startswith("NOT at the registered size")
    assert experiment.size_note({**part, "at_registered_size": True}) == "at the registered size"
    # an experiment whose registered run is one whole: a subset of its conditions is never a part
    assert get_experiment("kv-retrieval").size_note({**part, "conditions_asked": "75keys@*"}).startswith("NOT")


def test_no_committed_report_of_a_registered_run_says_it_is_not_at_the_registered_size():
    for page in sorted(RESULTS.glob("*/report*.md")):
        text = page.read_text(encoding="utf-8")
        assert "NOT at the registered size" not in text, page.relative_to(REPO)
        assert "at the registered size" in text or "a part of the registered run" in text, page.relative_to(REPO)
    for name in ("report.md", "report_20docs.md", "report_30docs.md"):
        text = (RESULTS / "lost-in-the-middle" / name).read_text(encoding="utf-8")
        assert "200 complete of 200 drawn, a part of the registered run" in text, name
