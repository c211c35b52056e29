"""The committed results stay light and stay readable: ``bench/results`` holds at most 40 MB of tracked files, none
over 10 MB, its answer caches gzip-compressed; and a committed report re-renders from its compressed caches with
the figures it holds (ICR2 Table 3: eleven arms' 426 answers each, scored and tested again, no model)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from icr2_components.evaluation.experiments.icr2_fine_tuning_arms import (
    ARMS,
    CLAIM_ARMS,
    PAIRS,
    REFERENCES,
    registered_ids,
)
from icr2_components.evaluation.reports.arms_report import arms_report, load_arm

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
MAX_TOTAL, MAX_FILE = 40_000_000, 10_000_000


def _tracked_results() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "bench/results"], cwd=REPO, capture_output=True,
                                check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are what is measured")
    return [REPO / name for name in listed.decode().split("\0") if name and (REPO / name).is_file()]


@pytest.mark.unit
def test_the_committed_results_stay_under_their_size_budget():
    files = _tracked_results()
    sizes = {str(f.relative_to(REPO)): f.stat().st_size for f in files}
    assert sum(sizes.values()) <= MAX_TOTAL, f"bench/results holds {sum(sizes.values()) / 1e6:.1f} MB"
    assert not {name: size for name, size in sizes.items() if size > MAX_FILE}
    # answer caches are committed compressed (answers.jsonl.gz); a plain one is 10-20 times larger
    assert not [name for name in sizes if name.endswith("answers.jsonl")]
    # adapters keep no copy of their base model's tokenizer (models/adapters.py rebuilds it)
    assert not [name for name in sizes if "/adapters/" in name and name.endswith("tokenizer.json")]


def test_table_3_re_renders_from_the_committed_gzip_caches_with_its_figures():
    folder = RESULTS / "icr2_table3"
    committed = json.loads((folder / "report.json").read_text())
    # each arm's cache is named as runs name it (answers.jsonl) and found in its committed form, answers.jsonl.gz
    assert all((folder / "arms" / arm / "answers.jsonl.gz").is_file() for arm in committed["arms"])
    answers = {arm.name: load_arm(folder / "arms" / arm.name / "answers.jsonl", arm.context_type, arm.pipeline)
               for arm in ARMS if arm.name in committed["arms"]}
    report = arms_report(answers, list(REFERENCES), list(CLAIM_ARMS), question_ids=registered_ids("eval"),
                         pairs=list(PAIRS))
    assert report["n"] == committed["n"] == 426 and len(report["arms"]) == len(committed["arms"]) == 11
    for name, arm in committed["arms"].items():
        mine = report["arms"][name]
        assert (mine["answer_match"], mine["exact_match"], mine["vs"]) == (
            arm["answer_match"], arm["exact_match"], arm["vs"]), name
    assert report["pairs"] == committed["pairs"] and report["claim"] == committed["claim"]
