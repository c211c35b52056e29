"""Every registered claim set was committed before the first answer of the run it is about, read from the
repository's own history (``git log``), not from what the documents say of themselves.

A claim set is a pre-registration file (``bench/data/**/*preregistration.md``) or a section of the benchmark pages
whose heading says its claims were registered before the run (``docs/benchmarks/*.md``). Its run's first answer is
the earliest of: the first commit holding that run's answers (a committed answer cache or result file, or the
part of a shared cache that belongs to the run, found by a text only its answers hold) and the start of the run as
the committed pages state it (a run writes answers long before any of them is committed).

Two claim sets were committed after their run had started writing answers; they are listed, with the reason, in
``KNOWN_LATE``. Any other claim set committed after its run's first answer fails, and so does a claim set the
registry below does not know (add it, with where its run's answers are).
"""

from __future__ import annotations

import gzip
import re
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache, partial
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
# the pages the registered sections live in now, and the page they were first committed to
SECTION_FILES = ("docs/benchmarks/reproduce.md", "docs/benchmarks/answer-quality.md", "BENCHMARKS.md")
REGISTERED_HEADING = re.compile(r"^#+ .*claims? registered before.*$", re.IGNORECASE | re.MULTILINE)
STAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[ ,]+(\d{2}:\d{2})")


@dataclass(frozen=True)
class Registration:
    """One claim set and where its run's answers are."""

    name: str
    claims: str  # the file holding the claims (as committed first)
    heading: str | None = None  # the section's heading, when the claims are a section of a page
    # (path, text only this run's answers hold, or None: anything at the path is this run's)
    answers: tuple[tuple[str, str | None], ...] = ()
    # (page, its words stating when the run started), when the pages state it
    started: tuple[str, str] | None = None
    also_in: tuple[str, ...] = field(default=())  # other files the section's first commit may be in


REPRODUCE = "docs/benchmarks/reproduce.md"
LITM_CACHE = "bench/results/reproduce/lost-in-the-middle/compare_answers.jsonl"
REGISTRY = (
    Registration(
        "lost-in-the-middle, 10 documents", REPRODUCE,
        "### `lost-in-the-middle` at the registered size: claims registered before reading its answers",
        answers=((LITM_CACHE, "|10docs@"),),
        started=(REPRODUCE, "The 10-document part started 2026-11-29 05:06")),
    Registration(
        "kv-retrieval", REPRODUCE,
        "### `kv-retrieval` at the registered size: claims registered before reading its answers",
        answers=(("bench/results/reproduce/kv-retrieval/compare_answers.jsonl", None),),
        started=(REPRODUCE, "started 2026-11-29 06:41")),
    Registration(
        "lost-in-the-middle, 20 documents", REPRODUCE,
        "### `lost-in-the-middle` at 20 and 30 documents, and `cub`: claims registered before their runs",
        answers=((LITM_CACHE, "|20docs@"), ("bench/results/reproduce/lost-in-the-middle/report_20docs.json", None))),
    Registration(
        "lost-in-the-middle, 30 documents", REPRODUCE,
        "### `lost-in-the-middle` at 20 and 30 documents, and `cub`: claims registered before their runs",
        answers=((LITM_CACHE, "|30docs@"), ("bench/results/reproduce/lost-in-the-middle/report_30docs.json", None)),
        started=(REPRODUCE, "30 in parts 2026-12-01 18:43")),
    Registration(
        "cub", REPRODUCE,
        "### `lost-in-the-middle` at 20 and 30 documents, and `cub`: claims registered before their runs",
        answers=(("bench/results/reproduce/cub/compare_answers.jsonl", None),),
        started=(REPRODUCE, "started at registered size 2026-11-29 18:17")),
    Registration(
        "ICR2 Table 3 (fine-tuning arms)", "bench/data/icr2_table3/preregistration.md",
        answers=(("bench/results/icr2_table3/arms", None),)),
    Registration(
        "gates, the confirmatory held-apart set", "bench/data/gate_confirm_preregistration.md",
        answers=(("bench/results/gate_confirm", None),)),
    Registration(
        "the Python-documentation comparison", "bench/data/python_docs_preregistration.md",
        # its answers stayed in runs/; the page states when the comparison ran
        started=("docs/benchmarks/answer-quality.md", "2026-11-28, 11:30-13:02")),
    Registration(
        "training throughput, the judged run", "bench/data/training_throughput_preregistration.md",
        # training_throughput.json held an earlier machine's figures; the judged run is the one with dev_offset 0
        answers=(("bench/results/training_throughput.json", '"dev_offset": 0'),
                 ("bench/results/training_throughput_replicate.json", None))),
)

#: claim sets committed after their run had started writing answers (before any of those answers was read), as
#: their sections say; listed so that the test names them instead of hiding them, and fails on any other
KNOWN_LATE = {
    "lost-in-the-middle, 10 documents": "the 10-document part started 05:06; its claims were written at 05:23 and "
                                        "committed at 05:24, while the run was writing answers none of which "
                                        "had been read",
    "kv-retrieval": "the run started 06:41; its claims were written at 06:42 and committed at 06:42, while the run "
                    "was writing answers none of which had been read",
}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module", autouse=True)
def whole_history():
    try:
        shallow = git("rev-parse", "--is-shallow-repository").strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the claims are checked against the repository's history")
    if shallow == "true":
        pytest.skip("a shallow clone: the claims are checked against the repository's whole history")


def _text(path: str) -> str:
    return " ".join((REPO / path).read_text(encoding="utf-8").split())


def _names(path: str) -> tuple[str, ...]:
    """An answer cache's names over its history: committed as JSON lines, then gzip-compressed (``.gz``)."""
    return (path, path + ".gz") if path.endswith(".jsonl") else (path,)


def _commits(path: str) -> list[tuple[str, int]]:
    """(commit, commit time) of every commit touching ``path`` (under any of its names), oldest first."""
    rows = git("log", "--format=%H %ct", "--reverse", "--", *_names(path)).split()
    return [(rows[i], int(rows[i + 1])) for i in range(0, len(rows), 2)]


def _holds(commit: str, path: str, marker: str) -> bool:
    """Whether ``path`` at ``commit`` holds ``marker`` (read as a stream: the caches are tens of MB)."""
    wanted = marker.encode()
    for name in _names(path):
        if subprocess.run(["git", "cat-file", "-e", f"{commit}:{name}"], cwd=REPO).returncode != 0:
            continue
        with subprocess.Popen(["git", "cat-file", "blob", f"{commit}:{name}"], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) as process:
            stream = gzip.GzipFile(fileobj=process.stdout) if name.endswith(".gz") else process.stdout
            tail = b""
            for chunk in iter(partial(stream.read, 1 << 20), b""):
                if wanted in tail + chunk:
                    process.kill()
                    return True
                tail = chunk[-len(wanted):]
    return False


@cache
def first_answer_commit(path: str, marker: str | None) -> int | None:
    """The time of the first commit whose ``path`` holds this run's answers (the caches only grow, so a binary
    search over the commits touching ``path`` finds the first holding ``marker``); None: never committed."""
    commits = _commits(path)
    if not commits:
        return None
    if marker is None:
        return commits[0][1]
    low, high = 0, len(commits)
    while low < high:
        middle = (low + high) // 2
        if _holds(commits[middle][0], path, marker):
            high = middle
        else:
            low = middle + 1
    return commits[low][1] if low < len(commits) else None


@cache
def claims_committed(registration: Registration) -> int:
    """The time of the first commit holding the claims: the file's first commit, or the first commit adding the
    section's heading to any page it has been on."""
    if registration.heading is None:
        times = [t for _, t in _commits(registration.claims)]
    else:
        out = git("log", "--format=%ct", "-S", registration.heading, "--", *SECTION_FILES)
        times = [int(t) for t in out.split()]
    assert times, f"{registration.name}: its claims were never committed"
    return min(times)


def run_started(registration: Registration) -> int | None:
    if registration.started is None:
        return None
    page, words = registration.started
    assert " ".join(words.split()) in _text(page), f"{page} no longer says {words!r}"
    day, clock = STAMP.search(words).groups()
    return int(datetime.fromisoformat(f"{day}T{clock}").replace(tzinfo=UTC).timestamp())


def first_answer(registration: Registration) -> int:
    times = [first_answer_commit(path, marker) for path, marker in registration.answers]
    times.append(run_started(registration))
    known = [t for t in times if t is not None]
    assert known, f"{registration.name}: no committed answer and no stated start: nothing to check against"
    return min(known)


def _when(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _late() -> dict[str, str]:
    late = {}
    for registration in REGISTRY:
        committed, answered = claims_committed(registration), first_answer(registration)
        if committed > answered:
            late[registration.name] = f"claims committed {_when(committed)}, first answer {_when(answered)}"
    return late


def test_every_claim_set_was_committed_before_its_runs_first_answer_but_the_two_known():
    late = _late()
    new = {name: when for name, when in late.items() if name not in KNOWN_LATE}
    assert not new, f"claim sets committed after their run's first answer: {new}"
    # the known ones are still found (the check can see them), so the list says what the history shows
    assert set(late) == set(KNOWN_LATE), f"found late: {sorted(late)}; listed: {sorted(KNOWN_LATE)}"


def test_the_registry_knows_every_claim_set_committed():
    """A new pre-registration file or registered section must be added to the registry with its run's answers."""
    files = {str(p.relative_to(REPO)) for p in (REPO / "bench" / "data").rglob("*preregistration*.md")}
    registered = {r.claims for r in REGISTRY}
    assert files <= registered, f"claims files the registry lacks: {sorted(files - registered)}"
    headings = set()
    for page in (REPO / "docs" / "benchmarks").glob("*.md"):
        headings |= {m.group(0).strip() for m in REGISTERED_HEADING.finditer(page.read_text(encoding="utf-8"))}
    known = {r.heading for r in REGISTRY if r.heading}
    assert headings <= known, f"registered sections the registry lacks: {sorted(headings - known)}"
    for registration in REGISTRY:
        if registration.heading:
            assert registration.heading in (REPO / registration.claims).read_text(encoding="utf-8"), registration.name
        for path, _ in registration.answers:
            assert any((REPO / name).exists() for name in _names(path)), f"{registration.name}: no {path}"
