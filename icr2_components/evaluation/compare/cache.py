"""The per-question cache of ``icr2 compare``: one JSON line per (pipeline hash, question id, context type).

Lines are appended and flushed as each answer arrives, so an interrupted run loses at most the answer being
generated; a re-run reads the file and skips every key already answered (records with an ``error`` are retried).

Every line proves it is whole (``seal``): it carries ``record_sha``, a SHA-256 of its own content, so a line
edited by hand (an answer changed, a field dropped) is refused, naming the file and the line. A key is written once;
a record that replaces an earlier one of its key (a failed request answered again, a stale context redone) says
so in ``replaces`` (the earlier line's ``record_sha``), so a line copied or a line removed by hand is refused too,
and no reader ever picks one of two lines of a key on its own. An unterminated last line (a run killed while
writing it) is left out and counted (``cut_tail_lines``); a cache opened for writing first cuts it off (or
terminates it, when it is a whole record), so the next answer starts on a fresh line. Files written before lines
carried ``record_sha`` are read by the report readers (``read_answer_records``) as they are, counted as
``unsealed_lines``, and refused for writing: ``icr2 seal-cache FILE`` seals such a file once its answers are checked.

What decides an answer, and how a cached record is checked against it, so that a resumed run never mixes answers
to different inputs. An answer's identity is the key (``cache_key``: pipeline hash, question id, context type)
plus three inputs each record stores and ``reuse_decision`` compares with the run's own:

- the pipeline hash (``icr2_components.pipeline_spec.behaviour_hash``, in the key): the YAML's components,
  connections, inputs, outputs and context entry, after a ``--backend`` has been applied to them (so the served
  model, its URL and a model override are in it), and, for a pipeline that reads an index, the index config's
  contents and the stores' ``RETRIEVAL_BEHAVIOUR_VERSION`` (so open-retrieval answers follow the index), and, for
  a pipeline whose components read artifacts (a gate's ``artifact:``, probed heads), their contents (so a
  retrained gate or re-probed heads are answered again);
- the question's text: every record stores the text it was asked (``query``, sealed with the line), and a record
  whose ``query`` differs from the question set's text now is ``stale_question``: asked again, or left out by
  ``--report-only`` (a question id reused by another set, or a question reworded, never inherits an answer).
  A record holding no ``query`` (none written by compare) is reused and counted as ``question_unchecked``;
- the passages compare itself gives (the controlled ``gold``, ``conflicting``, ``irrelevant`` contexts, and the
  oracle's gold passages under ``open``): each record stores ``context_sha`` (``context_sha``: ids and contents,
  in order), and a record whose ``context_sha`` differs from the context built now is ``stale_context``:
  re-answered, or left out by ``--report-only``. Records written before ``context_sha`` existed are reused but
  counted as ``context_unchecked``;
- the answer budget a run asks (``--max-new-tokens``; None: the pipeline's own, which its hash covers): each
  record stores ``max_new_tokens``, and one answered under another budget is ``stale_budget``, re-answered like
  a stale context (records from before the field are reused).

The question set's labels (``LABEL_FIELDS``: gold answers, gold passage ids, the conflicting answer, the task
type) are not part of an answer. A record keeps the labels it was written with, for reading the file alone, but a
run scores every answer, cached or new, with the labels of the question set it is given now
(``with_labels``), so an edited gold answer re-scores the cached answers without asking the model again, and the
report names the question set (path and SHA-256) whose labels it scored.

The file is plain JSON lines or gzip JSON lines, as its name says (``answers.jsonl`` / ``answers.jsonl.gz``;
gzip is recognised by its content too). A cache named one way is found under the other name when only that one
exists (``resolve_cache_path``), so a reader given ``answers.jsonl`` reads a committed ``answers.jsonl.gz`` and a
run resumes an old plain cache in place; runs name new caches ``.gz``. A gzip cache grows by one gzip member per
record (``records.gzip_lines``), and every ``COMPACT_EVERY`` records those small members are rewritten as one
(atomically), so a finished cache compresses about as well as one compressed at once. A run killed while writing
leaves a cut last member: the lines before it are read, the cut line is counted in ``cut_tail_lines`` like a cut
plain line, and a writer rewrites the file without it before appending.

Usage:
    >>> from haystack import Document
    >>> from icr2_components.evaluation.compare.cache import context_sha, reuse_decision
    >>> sha = context_sha([Document(id="p1", content="Paris is the capital of France.")])
    >>> reuse_decision({"context_sha": sha}, sha), reuse_decision({}, sha), reuse_decision({"context_sha": "x"}, sha)
    ('reuse', 'context_unchecked', 'stale_context')
    >>> reuse_decision({"query": "Capital of France?", "context_sha": sha}, sha, question="Capital of Spain?")
    'stale_question'
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from icr2_components.errors import UserInputError
from icr2_components.records.gzip_lines import (
    GzipLinesError,
    append_member,
    is_gzip_file,
    read_members,
    rewrite,
)

#: ``context_sha`` of a controlled context type that could not be built for a question (no passages given)
NO_CONTEXT = "none"
#: the reuse decisions (``reuse_decision``); all but the first are also run counters
REUSE, STALE_CONTEXT, CONTEXT_UNCHECKED, STALE_BUDGET = "reuse", "stale_context", "context_unchecked", "stale_budget"
STALE_QUESTION, QUESTION_UNCHECKED = "stale_question", "question_unchecked"
#: the decisions that redo a cached answer (or, in a report-only run, leave it out)
STALE = (STALE_CONTEXT, STALE_BUDGET, STALE_QUESTION)
#: the decisions that reuse a cached answer whose inputs the record cannot show (counted, so that it shows)
UNCHECKED = (CONTEXT_UNCHECKED, QUESTION_UNCHECKED)
#: the fields of an answer record that are the question set's labels, not part of the answer (``with_labels``)
LABEL_FIELDS = ("answers", "gold_ids", "conflicting_answer", "task_type")
_ANY_BUDGET = object()
_ANY_QUESTION = object()


def cache_key(pipeline_hash: str, question_id: str, context_type: str) -> str:
    """The key of one answer: pipeline hash, question id and context type (the inputs a record stores besides are
    checked by ``reuse_decision``)."""
    return f"{pipeline_hash}|{question_id}|{context_type}"


def context_sha(documents: Sequence[Any] | None) -> str:
    """A short SHA-256 of the passages given (each one's id and content, in order); ``NO_CONTEXT`` for None."""
    if documents is None:
        return NO_CONTEXT
    material = json.dumps([[d.id, d.content] for d in documents], ensure_ascii=False)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def reuse_decision(record: dict[str, Any], expected_sha: str | None, max_new_tokens: Any = _ANY_BUDGET,
                   question: Any = _ANY_QUESTION) -> str:
    """Whether a finished cached ``record`` may stand for the answer this run would give.

    :param record: the cached answer record.
    :param expected_sha: the ``context_sha`` of the passages compare gives now (None where it gives none, i.e.
        open retrieval, which the pipeline hash covers).
    :param max_new_tokens: the run's answer budget (left out: not checked).
    :param question: the question's text now (left out: not checked).
    :returns: ``"reuse"``; ``"stale_budget"`` (answered under another budget), ``"stale_question"`` (asked another
        text), ``"stale_context"`` (given other passages): re-answer it, or leave it out of a report-only run (checked
        in that order); or, when nothing is stale, ``"context_unchecked"`` (a record from before ``context_sha``) or
        ``"question_unchecked"`` (a record holding no question text): reused, and counted so that it shows.
    """
    if max_new_tokens is not _ANY_BUDGET and "max_new_tokens" in record and record["max_new_tokens"] != max_new_tokens:
        return STALE_BUDGET
    question_known = isinstance(record.get("query"), str)
    if question is not _ANY_QUESTION and question_known and record["query"] != question:
        return STALE_QUESTION
    if expected_sha is not None:
        if "context_sha" not in record or record["context_sha"] is None:
            return CONTEXT_UNCHECKED
        if record["context_sha"] != expected_sha:
            return STALE_CONTEXT
    if question is not _ANY_QUESTION and not question_known:
        return QUESTION_UNCHECKED
    return REUSE


def with_labels(record: dict[str, Any], labels: dict[str, Any]) -> dict[str, Any]:
    """A copy of an answer ``record`` carrying the question set's labels now (``labels``: the ``LABEL_FIELDS`` a run
    builds for its question and context type) in place of those it was written with; the answer's own fields
    stay. Scoring reads the copy, never the cached labels."""
    return {**record, **{k: labels[k] for k in LABEL_FIELDS if k in labels}}


#: the field holding a line's own content hash (``seal``), and the one naming the record a line replaces
SEAL_FIELD, REPLACES_FIELD = "record_sha", "replaces"
SEAL_COMMAND = "icr2 seal-cache {path}"


class AnswerCacheError(UserInputError):
    """A cache file that does not prove it is whole: an edited or unreadable line, a key written twice, a record
    that replaces one not in the file, or (for writing) lines written before records were sealed."""


#: the suffix of a gzip cache; a gzip cache's small one-record members are merged every this many records
GZIP_SUFFIX, COMPACT_EVERY = ".gz", 100


def other_form(path: str | Path) -> Path:
    """``X.gz`` for ``X``, ``X`` for ``X.gz``: the name of the same cache in the other form."""
    path = Path(path)
    return path.with_suffix("") if path.suffix == GZIP_SUFFIX else path.with_name(path.name + GZIP_SUFFIX)


def resolve_cache_path(path: str | Path) -> Path:
    """The file of the cache named ``path``: ``path`` if it exists, else its other form (``other_form``) if that
    exists, else ``path`` (a new cache is written in the form its name says).

    :raises AnswerCacheError: both forms exist (two caches of one run: keep one).
    """
    path = Path(path)
    other = other_form(path)
    if path.exists() and other.exists():
        raise AnswerCacheError(f"Both {path} and {other} exist: one cache in two files. Keep the one the run wrote "
                               "last (compare their record counts) and delete the other.")
    return other if not path.exists() and other.exists() else path


def cache_bytes(path: str | Path) -> tuple[bytes, bool]:
    """A cache file's content, decompressed when it is gzip (a cut last member's partial data included, as a plain
    file's cut last line is), and whether it is gzip.

    :raises AnswerCacheError: named ``.gz`` but not gzip, or a damaged (not cut) gzip member.
    """
    path = Path(path)
    if not is_gzip_file(path):
        if path.suffix == GZIP_SUFFIX and path.stat().st_size:
            raise AnswerCacheError(f"{path} is named .gz but is not gzip-compressed; rename it without .gz if it is "
                                   "plain JSON lines.")
        return path.read_bytes(), path.suffix == GZIP_SUFFIX
    try:
        content = read_members(path)
    except GzipLinesError as error:
        raise AnswerCacheError(str(error)) from None
    return content.data + content.cut_data, True


def record_sha(record: dict[str, Any]) -> str:
    """A short SHA-256 of a record's content (every field but ``record_sha``; keys sorted, ASCII escapes, so the
    same record always hashes alike)."""
    body = {k: v for k, v in record.items() if k != SEAL_FIELD}
    material = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(material.encode("ascii")).hexdigest()[:16]


def seal(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its ``record_sha``."""
    body = {k: v for k, v in record.items() if k != SEAL_FIELD}
    return {**body, SEAL_FIELD: record_sha(body)}


def _parse_line(path: Path, number: int, raw: bytes) -> dict[str, Any]:
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise AnswerCacheError(f"{path} line {number} is not a JSON record ({error}): the file was damaged or edited. "
                               "Delete that line to answer its question again.") from None
    if not isinstance(record, dict) or not isinstance(record.get("key"), str):
        raise AnswerCacheError(f"{path} line {number} is not an answer record (a JSON object with a string key). "
                               "Delete that line to answer its question again.")
    return record


def cache_lines(path: str | Path) -> list[str]:
    """The lines of the cache named ``path`` as text, whichever form it is in (``resolve_cache_path``; a cut last
    gzip member's partial data included, as a plain file's cut last line is); for reading a cache as a file."""
    return cache_bytes(resolve_cache_path(path))[0].decode("utf-8").splitlines()


class AnswerCache:
    """Append-only JSONL of sealed answer records keyed by ``cache_key`` (module docstring).

    :param path: The cache file (created by the first ``add``), plain or ``.gz``; found under its other form's name
        when only that exists (``resolve_cache_path``).
    :param writable: True (default) for a run that appends: a cut last line is cut off (counted in
        ``cut_tail_lines``) and a file of unsealed lines is refused. False for readers: the file is not touched,
        unsealed lines are read and counted in ``unsealed_lines``.
    :raises AnswerCacheError: a line edited or unreadable (file and line named), a key written twice without
        ``replaces``, a ``replaces`` naming no earlier line of its key; for writing, a file of unsealed lines.
    """

    def __init__(self, path: str | Path, writable: bool = True) -> None:
        self.path = resolve_cache_path(path)
        self.records: dict[str, dict[str, Any]] = {}
        self.cut_tail_lines = 0
        self.unsealed_lines = 0
        self.replaced_lines = 0
        self.gzip = self.path.suffix == GZIP_SUFFIX
        # a gzip cache's trailing one-record members (merged every COMPACT_EVERY records): where they start in the
        # file, and their data
        self._tail_start = 0
        self._tail: list[bytes] = []
        if self.path.is_dir():
            raise AnswerCacheError(f"{self.path} is a folder; the answer cache is a file (answers.jsonl).")
        if self.path.exists():
            self._read(writable)

    @property
    def unreadable_lines(self) -> int:
        """Lines left out on reading: a cut last line (every other unreadable line is refused)."""
        return self.cut_tail_lines

    def _read(self, writable: bool) -> None:
        raw, self.gzip = cache_bytes(self.path)
        lines = raw.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        parsed = [(number, _parse_line(self.path, number, line)) for number, line in enumerate(lines, 1)
                  if line.strip()]
        repair = None  # what a writer does to the tail once the lines are checked
        if tail.strip():
            tail_record = self._whole_tail(tail)
            if tail_record is not None:  # a whole record whose newline was never written
                parsed.append((len(lines) + 1, tail_record))
                repair = "terminate"
            else:  # cut while being written: left out (its answer is redone), and cut off before appending
                self.cut_tail_lines = 1
                repair = "cut"
        sealed = any(SEAL_FIELD in record for _, record in parsed)
        if not sealed and parsed:
            self.unsealed_lines = len(parsed)
            if writable:
                raise AnswerCacheError(
                    f"{self.path} holds {len(parsed)} record(s) written before answer records were sealed (no "
                    f"{SEAL_FIELD}), so an edited answer there cannot be told from a real one. Check the file and "
                    f"seal it ({SEAL_COMMAND.format(path=self.path)}), or write to a fresh --out folder.")
        lines_of: dict[str, int] = {}
        for number, record in parsed:
            key = record["key"]
            if sealed:
                written = record.get(SEAL_FIELD)
                if written is None:
                    raise AnswerCacheError(f"{self.path} line {number} has no {SEAL_FIELD} while the file's other "
                                           "lines do: it was added or edited by hand. Delete that line to answer "
                                           "its question again.")
                if written != record_sha(record):
                    raise AnswerCacheError(f"{self.path} line {number} ({key}) does not match its {SEAL_FIELD}: the "
                                           "record was edited after it was written. Delete that line to answer its "
                                           "question again.")
            earlier = self.records.get(key)
            replaces = record.get(REPLACES_FIELD)
            if earlier is not None and (replaces is None or replaces != earlier.get(SEAL_FIELD)):
                how = ("Delete the line that is wrong." if sealed else
                       f"Check them; {SEAL_COMMAND.format(path=self.path)} keeps the later one and seals the file.")
                raise AnswerCacheError(f"{self.path} has key {key} on lines {lines_of[key]} and {number}, and line "
                                       f"{number} does not say it replaces line {lines_of[key]}: a line was copied "
                                       f"or edited. {how}")
            if earlier is None and replaces is not None:
                raise AnswerCacheError(f"{self.path} line {number} ({key}) replaces a record that is not in the file "
                                       "before it: a line was removed or moved. Delete that line to answer its "
                                       "question again.")
            self.replaced_lines += earlier is not None
            self.records[key] = record
            lines_of[key] = number
        if writable and self.gzip:
            self._repair_gzip(raw, tail, repair)
        elif writable and repair == "terminate":
            with self.path.open("ab") as handle:
                handle.write(b"\n")
        elif writable and repair == "cut":
            with self.path.open("r+b") as handle:
                handle.truncate(len(raw) - len(tail))

    def _repair_gzip(self, raw: bytes, tail: bytes, repair: str | None) -> None:
        """Before appending to a gzip cache: rewrite it whole without a cut line (or with a missing newline), and
        merge a tail of small members left by a run that ended before merging them."""
        content = read_members(self.path)
        if repair is not None or content.cut_offset is not None:
            kept = raw[:len(raw) - len(tail)] + (tail + b"\n" if repair == "terminate" else b"")
            rewrite(self.path, 0, kept)
            return
        small = 0
        for member in reversed(content.members):
            if member.lines >= COMPACT_EVERY:
                break
            small += 1
        if small > 1:
            first = content.members[-small]
            rewrite(self.path, first.start, content.data[first.data_start:])

    def compact(self) -> None:
        """Merge a gzip cache's trailing one-record members into one member (atomically); nothing for a plain
        cache. ``add`` does it every ``COMPACT_EVERY`` records; a run calls it once more when it ends."""
        if self.gzip and len(self._tail) > 1:
            rewrite(self.path, self._tail_start, b"".join(self._tail))
        self._tail = []

    def _whole_tail(self, tail: bytes) -> dict[str, Any] | None:
        try:
            record = json.loads(tail.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        # a cut JSON object never parses; one that does is checked below like every other line
        return record if isinstance(record, dict) and isinstance(record.get("key"), str) else None

    def done(self, key: str) -> bool:
        record = self.records.get(key)
        return record is not None and not record.get("error")

    def add(self, record: dict[str, Any]) -> dict[str, Any]:
        """Append ``record`` sealed (naming the record of its key it replaces, if any) and return what was written."""
        body = {k: v for k, v in record.items() if k not in (SEAL_FIELD, REPLACES_FIELD)}
        earlier = self.records.get(body["key"])
        if earlier is not None:
            body[REPLACES_FIELD] = earlier[SEAL_FIELD]
        sealed = seal(body)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(sealed, ensure_ascii=False) + "\n").encode("utf-8")
        if self.gzip:
            if not self._tail:
                self._tail_start = os.path.getsize(self.path) if self.path.exists() else 0
            append_member(self.path, line)
            self._tail.append(line)
            if len(self._tail) >= COMPACT_EVERY:
                self.compact()
        else:
            with self.path.open("ab") as handle:
                handle.write(line)
                handle.flush()
        self.records[body["key"]] = sealed
        return sealed

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records.values())


def read_answer_records(path: str | Path) -> list[dict[str, Any]]:
    """All current records of a cache file (for recomputing a report's numbers); the file is only read."""
    return list(AnswerCache(path, writable=False))


def seal_cache(path: str | Path) -> dict[str, Any]:
    """Seal a cache written before records were sealed, in place: each readable line gets its ``record_sha``; of a
    key written twice, the later line replaces the earlier (what readers of unsealed files took); lines that are
    not records (a cut line, text glued onto one) are dropped. Returns the counts; the old file is kept as
    ``<file>.unsealed``.

    :raises AnswerCacheError: the file is sealed already, or missing.
    """
    path = resolve_cache_path(path)
    if not path.is_file():
        raise AnswerCacheError(f"No cache file at {path}.")
    kept: list[dict[str, Any]] = []
    dropped: list[int] = []
    for number, line in enumerate(cache_bytes(path)[0].split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            record = _parse_line(path, number, line)
        except AnswerCacheError:
            dropped.append(number)
            continue
        if SEAL_FIELD in record:
            raise AnswerCacheError(f"{path} is sealed already (line {number} has {SEAL_FIELD}); nothing to do.")
        kept.append(record)
    backup = path.with_name(path.name + ".unsealed")
    path.replace(backup)
    cache = AnswerCache(path)
    for record in kept:
        cache.add(record)
    cache.compact()
    return {"file": str(path), "records": len(kept), "keys": len(cache.records),
            "replaced": len(kept) - len(cache.records), "dropped_lines": dropped, "unsealed_copy": str(backup)}
