"""What the surfaces share: a case, the classes an outcome falls in, and the checks of a result.

Classes, decided from what the run shows, never from the case's name:

- ``clear error``: the CLI exits non-zero with one ``icr2 <command>: error:`` line and no traceback; the server
  answers a 4xx whose error names the field; a component raises a ``ValueError``/``TypeError``/library error (or
  an ``OSError`` the library worded) from the library's or Haystack's own code, in one line holding what the case
  needs it to say (the parameter and what it got);
- ``right result``: success, and the case's check of the result holds (read apart from the code that made it);
- ``traceback``: a Python traceback on stderr, or an HTTP 5xx;
- ``raw crash``: a component raises from deep inside (numpy, torch, a KeyError/AttributeError/IndexError), or a
  message that does not name the input (``[Errno 2]`` and the like);
- ``silent wrong result``: success where an error was due or the check fails, or data left wrong after an error;
- ``data loss``: input the run was given is gone without a word (rows swallowed into another's text, a store
  emptied, skipped inputs counted but never named): the case's ``kept`` check fails, whatever the exit;
- ``unclear error``: the CLI or the server refuses without a traceback, but not in one line saying what is needed;
- ``hang``: no answer within the case's time limit (the process is killed, the request abandoned).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ICR2 = [sys.executable, "-m", "icr2_components.cli"]
ES_URL = os.environ.get("ICR2_ES_URL", "http://127.0.0.1:9200")
LLAMA_URL = os.environ.get("ICR2_LLAMA_URL", "http://127.0.0.1:8089/v1")
_SHIPPED_LLAMA_URL = "http://127.0.0.1:8089/v1"


def llama_backend() -> str:
    """The ``--backend`` of the cases that answer over the llama.cpp server: the shipped ``llama_cpp_server`` when
    the server is at its URL, else a copy of that backend file pointing at ``ICR2_LLAMA_URL`` (so the bench runs
    beside servers on other ports, e.g. while CI holds the default ones)."""
    if LLAMA_URL.rstrip("/") == _SHIPPED_LLAMA_URL:
        return "llama_cpp_server"
    import tempfile

    shipped = yaml.safe_load((REPO / "backends" / "llama_cpp_server.yaml").read_text(encoding="utf-8"))
    shipped["served_model"]["api_base_url"] = LLAMA_URL
    path = Path(tempfile.gettempdir()) / f"icr2-bench-llama-{os.getpid()}.yaml"
    path.write_text(yaml.safe_dump(shipped), encoding="utf-8")
    return str(path)
CLASSES = ("clear error", "right result", "traceback", "raw crash", "silent wrong result", "data loss",
           "unclear error", "hang")
GOOD_CLASSES = ("clear error", "right result")
ERROR_LINE = re.compile(r"^icr2 [\w-]+: error: ")

# a check of an exit-0 run (or of the store after any run): (holds, what was observed)
Check = Callable[[subprocess.CompletedProcess], tuple[bool, str]]


@dataclass
class Case:
    """One bad input to the CLI or the server: a command (or ``runner``) and what makes its outcome right."""

    what: str
    argv: list[str]
    # exit 0: what makes the result right (None: an error was due, exit 0 is a silent wrong result)
    right: Check | None = None
    # any exit: what must hold of the store afterwards (an error that leaves wrong data is still a wrong result)
    after: Check | None = None
    # a clear error's line must contain each of these and none of the misleading ones
    says: tuple[str, ...] = ()
    not_says: tuple[str, ...] = ()
    setup: bool = False
    # run instead of the CLI command (the server cases): returns (exit-like status, stdout, stderr)
    runner: Callable[[], subprocess.CompletedProcess] | None = None
    surface: str = "CLI"
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 600
    # any exit: what must still be there (the rows of a table, the store's passages, every skip named); failing
    # it is data loss
    kept: Check | None = None


def article(wikipedia_id, title: str, *paragraphs) -> bytes:
    return json.dumps({"wikipedia_id": wikipedia_id, "wikipedia_title": title, "text": [title, *paragraphs]}).encode()


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def corpus_bytes(n: int = 6) -> list[bytes]:
    return [article(str(i), f"Article {i}", words(f"a{i}w", 120)) for i in range(n)]


# -- observations of the stores, made apart from the command that wrote them ----------------------------------


def es_index_of(config: Path) -> str:
    return yaml.safe_load(config.read_text())["store"]["index"]


def es_contents_of_index(index: str) -> tuple[int, str]:
    """(documents, their text joined) of an Elasticsearch index, read straight from the node."""
    try:
        urllib.request.urlopen(urllib.request.Request(f"{ES_URL}/{index}/_refresh", method="POST"), timeout=30).read()
        with urllib.request.urlopen(f"{ES_URL}/{index}/_search?size=1000", timeout=30) as response:
            hits = json.loads(response.read())["hits"]["hits"]
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return 0, ""
        raise
    return len(hits), "\n".join(json.dumps(hit["_source"]) for hit in hits)


def es_contents(config: Path) -> tuple[int, str]:
    return es_contents_of_index(es_index_of(config))


def in_memory_contents(store: Path) -> tuple[int, str]:
    """(documents, their text) of an in-memory store file, read as JSON (not through the package)."""
    if not store.is_file():
        return 0, ""
    documents = json.loads(store.read_text()).get("documents", [])
    return len(documents), "\n".join(str(d.get("content", "")) for d in documents)


def holds(read: Callable[[], tuple[int, str]], n: int, present: tuple[str, ...] = (),
          absent: tuple[str, ...] = ()) -> Check:
    """The store holds ``n`` documents, with each of ``present`` and none of ``absent`` in their text."""

    def check(_: Any) -> tuple[bool, str]:
        count, text = read()
        missing = [w for w in present if w not in text]
        found = [w for w in absent if w in text]
        ok = count == n and not missing and not found
        return ok, f"store holds {count} (expected {n})" + (f"; missing {missing}" if missing else "") + (
            f"; holds {found}" if found else "")

    return check


def output_says(*parts: str) -> Check:
    def check(result: subprocess.CompletedProcess) -> tuple[bool, str]:
        text = result.stdout + result.stderr
        missing = [p for p in parts if p not in text]
        return not missing, "output says " + ", ".join(repr(p) for p in parts) if not missing else (
            f"output lacks {missing}")

    return check


def both(first: Check, second: Check) -> Check:
    def check(result: subprocess.CompletedProcess) -> tuple[bool, str]:
        ok1, seen1 = first(result)
        ok2, seen2 = second(result)
        return ok1 and ok2, f"{seen1}; {seen2}"

    return check


def no_file(path: Path, what: str = "") -> Check:
    """Nothing was left at ``path`` (e.g. a stray temporary file or a report written anyway)."""

    def check(_: Any) -> tuple[bool, str]:
        left = [str(p.name) for p in path.parent.glob(path.name)] if any(c in path.name for c in "*?[") else (
            [path.name] if path.exists() else [])
        return not left, f"{what or path.name}: " + (f"left {left}" if left else "none left")

    return check


# -- classifying a process's outcome (the CLI, and the server seen as a client) -------------------------------


def timed_out(argv: list[str], error: subprocess.TimeoutExpired) -> subprocess.CompletedProcess:
    """A process killed at its time limit, as a result (exit -9, what it had written)."""
    def text(value: Any) -> str:
        return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")

    result = subprocess.CompletedProcess(argv, -9, text(error.stdout), text(error.stderr))
    result.hung_after_s = error.timeout  # type: ignore[attr-defined]
    return result


def outcome(result: subprocess.CompletedProcess) -> str:
    """The line a user reads: the error line, or the index/search summary."""
    err = [line for line in result.stderr.splitlines() if line.startswith("icr2 ")]
    if result.returncode != 0:
        text = err[-1] if err else (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        return text if len(text) <= 400 else text[:397] + "..."
    skipped = [
        line.strip() for line in result.stdout.splitlines() if line.startswith("skipped:") or ": skipped " in line
    ]
    if skipped:
        return skipped[0][:400]
    rows = [line for line in result.stdout.splitlines() if "│" in line and any(c.isdigit() for c in line)]
    cells = [c.strip() for c in rows[0].strip("│ ").split("│")] if rows else []
    if len(cells) == 8 and cells[0] in ("in_memory", "elasticsearch"):  # the `icr2 index` table
        return (
            f"indexed: {cells[2]} passages streamed, {cells[3]} in the store, {cells[5]} skipped, {cells[6]} rejected"
        )
    return (rows[0].strip() if rows else result.stdout.strip()[-200:]).replace("│", "|")[:400]


def wait_until_answering(server: subprocess.Popen, url: str, log_path: Path, headers: dict | None = None,
                         timeout_s: float = 300) -> None:
    """Wait until the ``icr2 serve`` at ``url`` answers 200 (``url`` is the route to poll); raise naming its log's
    tail when the process exits first, or after ``timeout_s``."""
    import time

    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        if server.poll() is not None:
            raise RuntimeError("icr2 serve exited: " + log_path.read_text()[-2000:])
        try:
            if httpx.get(url, headers=headers, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"icr2 serve not ready in {timeout_s:.0f} s")
        time.sleep(0.5)


def _holds(check: Check, result: subprocess.CompletedProcess) -> tuple[bool, str]:
    """A state check run on the outcome: a state that cannot be read is a check that fails, saying why."""
    try:
        return check(result)
    except (OSError, ValueError, KeyError, TypeError) as error:
        return False, f"state unreadable ({type(error).__name__}: {error})"


def classify(case: Case, result: subprocess.CompletedProcess) -> tuple[str, str]:
    """(class, what was observed that decided it)."""
    if getattr(result, "hung_after_s", None) is not None:
        return "hang", f"no exit within {result.hung_after_s:.0f} s (killed)"
    seen = []
    for check, failed_class in ((case.kept, "data loss"), (case.after, "silent wrong result")):
        if check is None:
            continue
        ok, observed = _holds(check, result)
        seen.append(observed)
        if not ok:
            return failed_class, "; ".join(seen)
    if "Traceback" in result.stderr:
        return "traceback", "; ".join(seen)
    if result.returncode == 0:
        if case.right is None:
            return "silent wrong result", "; ".join([*seen, "exit 0 where an error was due"])
        try:
            ok, observed = case.right(result)
        except (OSError, ValueError, KeyError, TypeError) as error:
            ok, observed = False, f"result unreadable ({type(error).__name__}: {error})"
        seen.append(observed)
        return ("right result" if ok else "silent wrong result"), "; ".join(seen)
    lines = [line for line in result.stderr.splitlines() if ERROR_LINE.match(line)]
    if len(lines) != 1:
        return "unclear error", "; ".join([*seen, f"{len(lines)} error lines"])
    missing = [w for w in case.says if w.lower() not in lines[0].lower()]
    misleading = [w for w in case.not_says if w.lower() in lines[0].lower()]
    if missing or misleading:
        return "unclear error", "; ".join([*seen, f"line lacks {missing}" if missing else "",
                                           f"line says {misleading}" if misleading else ""]).strip("; ")
    return "clear error", "; ".join(seen)
