"""The repository's text names things by what they do: no issue numbers and no words about how the work was organised.

A reader of the code, tests, docs, README, BENCHMARKS, CHANGELOG or bench scripts cannot follow a reference to a
numbered issue of this project, to a "session" or a "round" of work, or to an "audit": each must say what the thing
does or what was measured instead. Links to other projects' issues and pull requests stay (``owner/repo#123``,
GitHub URLs, a dotted project's numbered issue), and so do the words' ordinary technical senses (pytest's
``scope="session"``,
an HTTP or ONNX Runtime session, benchmark rounds such as "per round 0.84"). The measurement records under
``bench/results/`` and ``bench/data/`` are left as they were written; only the scripts among them are checked.

Fast: ``git ls-files`` and one pass of regular expressions over each text file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()

#: records of measurements, kept as written (their scripts are checked all the same)
RECORD_FOLDERS = ("bench/results/", "bench/data/")
SCRIPT_SUFFIXES = (".py", ".sh")
#: data and binary formats that are not prose
SKIPPED_SUFFIXES = (".jsonl", ".npz", ".png", ".jpg", ".gif", ".pdf", ".parquet", ".gz", ".zip", ".bin")
SKIPPED_FILES = {"LICENSE", THIS_FILE}

# an issue of this project by number, with a space, dash, underscore, hash or nothing between (examples below)
ISSUE_NUMBER = r"(?<![a-z])issues?[ _-]?#?\d+"
# a bare "#26" (not a Markdown heading, not part of a word or a path)
BARE_NUMBER = r"(?<![\w&/#-])#\d{1,5}\b"
# "stop 32", "session 3", "round 2" (not "--stop 620", not a benchmark's "per round 0.84")
NUMBERED_STEP = r"(?<![\w-])(?:stop|session|round)s? \d+\b(?![.,]\d)"
PROCESS_PHRASES = (
    r"\baudit(?:s|ed|ing)?\b",
    r"\b(?:this|that|a|one|new|next|earlier|previous|later|first|last) session(?:'s|s)?\b(?!-)",
    r"\b(?:within|fit|in|of) the session\b",
    r"\bother sessions\b",
    r"\bacross (?:two|three|four|several|\d+) sessions\b",
    r"\bdone when\b",
    r"\b(?:last|previous|next|first) round\b(?! of)",
    r"(?<![a-z])round[ _-](?:one|two|three|four)\b",
    r"\bthe issue(?:'s| names| asks| found| says)\b",
    r"\bthe brief\b",
    r"\bother helpers\b",
    r"\blent\b",  # a machine "lent to this task"
    r"\ba helper's\b",
)
FORBIDDEN = re.compile("|".join((ISSUE_NUMBER, BARE_NUMBER, NUMBERED_STEP, *PROCESS_PHRASES)), re.IGNORECASE)

#: a cheap first pass: only lines holding one of these words go through the patterns above
CANDIDATE = re.compile(r"issue|#\d|stop|session|round|audit|done when|brief|helper|lent", re.IGNORECASE)

# other projects' issues and pull requests, and standards cited by number: removed from a line before the check
ALLOWED = re.compile(
    r"https?://\S+"  # any URL, GitHub issue links included
    r"|\b[\w.-]+/[\w.-]+#\d+"  # owner/repo#123
    r"|\b[\w-]*[./][\w.-]*\w issues? \d+"  # a numbered issue of a project named with a dot or a slash
    r"|\bUAX #\d+"  # Unicode Standard Annex numbers
    r"|scope=[\"']session[\"']"  # pytest fixtures
    r"|#[0-9a-fA-F]{3}(?:[0-9a-fA-F]{3})?\b(?=\s*[;,)}\"'])",  # CSS colours such as #333; or #112233,
    re.IGNORECASE,
)

# pytest's own vocabulary: a fixture's scope named in a docstring ("``es_client`` (session): ...") and the end of the
# test session are the framework's words, not the project's
PYTEST_SESSION = re.compile(r"\(session\)|end of the session|other test sessions", re.IGNORECASE)


def checked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    paths = []
    for path in listed.decode("utf-8", "surrogateescape").split("\0"):
        if not path or path in SKIPPED_FILES or path.endswith(SKIPPED_SUFFIXES) or (ROOT / path).is_symlink():
            continue  # a tracked link (pipelines -> icr2_components/resources/pipelines) is checked where it points
        if path.startswith(RECORD_FOLDERS) and not path.endswith(SCRIPT_SUFFIXES):
            continue
        paths.append(path)
    return paths


def process_words(text: str) -> list[tuple[int, str]]:
    """(line number, offending words) for each line that names an issue of this project or a step of the work."""
    found = []
    if not CANDIDATE.search(text):
        return found
    for number, line in enumerate(text.splitlines(), start=1):
        if not CANDIDATE.search(line):
            continue
        line = PYTEST_SESSION.sub(" ", ALLOWED.sub(" ", line))
        hits = [match.group(0) for match in FORBIDDEN.finditer(line)]
        if hits:
            found.append((number, ", ".join(repr(hit) for hit in hits)))
    return found


@pytest.mark.parametrize(
    "line",
    [
        "as issue 15 found", "see issue-27's inputs", "issue #16's figure", "fixed in #26", "Issue 17. The question",
        "stop 32 of the plan", "round two (the second pass)", "the audit said", "before this session's change",
        "done when the test passes", "the issue's target", "across three sessions", "def round_two(tmp):",
        "no GPU was lent to this task", "bench/issue15_evaluations.sh", "def test_issue_27_inputs():",
    ],
)
@pytest.mark.unit
def test_process_words_are_found(line):
    assert process_words(line), line


@pytest.mark.parametrize(
    "line",
    [
        "llama.cpp issues 7052 and PR 6950", "see ggml-org/llama.cpp#26954", "https://github.com/a/b/issues/12",
        "Unicode UAX #29 word boundaries", '@pytest.fixture(scope="session")', "self.session = ort.InferenceSession(",
        "the writer is 0.88x (per round 0.84, 0.81)", "bench/x.py --start 600 --stop 620", "## Heading", "color: #333;",
        "``es_client`` (session): a client", "medians of 3 rounds", "issue tracking systems",
    ],
)
def test_other_projects_links_and_technical_senses_are_allowed(line):
    assert not process_words(line), process_words(line)


@pytest.mark.unit
def test_no_issue_numbers_or_process_words_in_the_repository():
    problems = []
    for path in checked_files():
        try:
            text = (ROOT / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary, or deleted in the working tree but not yet in the index
        problems += [f"{path}:{number}: {hits}" for number, hits in process_words(text)]
    assert not problems, (
        "name things by what they do, not by an issue number or a step of the work:\n" + "\n".join(problems)
    )
