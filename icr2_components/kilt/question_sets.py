"""Question sets in the formats users have: JSON lines, CSV, Parquet or a Hugging Face ``datasets`` dataset saved to
disk, read through a field mapping.

Only the question is required. Each other field is optional, per question and per set:

- ``answers``: the gold answers (a string, a list of strings, or in CSV ``a|b`` / a JSON list ``["a", "b"]``);
  a question without them still runs (latency, prompt tokens, judge metrics), but no answer metric is computed on it;
- ``gold_passage_ids``: ids of passages of the index that hold the answer (in-context recall, CUB's contexts);
- ``gold_sources``: the documents that hold the answer, as the index's passages name their source (the
  ``file_path`` meta of a folder corpus, e.g. ``library/json.html``; ``source_meta_field`` names another): their
  passages that contain a gold answer are the question's gold passages, whatever the chunking;
- ``conflicting_answer``: the answer CUB's conflicting context puts in the gold passage instead of the gold one
  (without it compare draws one of the same type from the set's other answers, as for a KILT file);
- ``id``: the question's id; without it, a stable id derived from the question text (``q-`` and 12 hex digits of
  its SHA-256), so that the same question keeps its id when the file is reordered or grows.

A field maps to a column (``answers=ans``) or, in JSON lines and ``datasets`` rows, a dotted path into nested
records (``answers=answers.text`` for SQuAD's ``{"text": [...], "answer_start": [...]}``). A row that cannot be
used is counted in the :class:`~icr2_components.records.SkipReport` by reason (``missing question``, ``bad
answers``, ``repeated question id``, ...) with its row number, never dropped silently; a column the mapping names
that the table does not have is an error naming the columns it has.

Two ways to say it, the same :class:`QuestionSet`:

- on the command line: ``icr2 compare --dataset questions.csv --field question=q --field answers=gold``
  (the format from the file name: ``.csv``, ``.parquet``, a folder made by ``Dataset.save_to_disk``, else JSON lines;
  ``--dataset-format`` names it);
- a small question-set file (strict YAML; paths relative to the file)::

      path: questions.csv
      format: csv                  # jsonl | csv | parquet | hf_dataset
      fields: {question: q, answers: gold, id: qid}   # also gold_passage_ids, gold_sources, conflicting_answer
      list_separator: "|"          # CSV: several answers or gold ids in one cell
      split: null                  # a saved DatasetDict: which split (needed when it has several)

Usage:
    >>> from icr2_components.kilt.question_sets import QuestionSet, read_question_rows
    >>> questions = QuestionSet.from_options("my_questions.csv", fields={"question": "q", "answers": "gold"})
    >>> rows, skips = read_question_rows(questions)
    >>> rows[0].question, rows[0].answers, skips.summary()
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icr2_components.errors import UserInputError
from icr2_components.records import SkipReport
from icr2_components.text.blank import is_blank

#: the formats a question set is read from (KILT task files and ICR2 benchmark files have readers of their own)
FORMATS = ("jsonl", "csv", "parquet", "hf_dataset")
FIELDS = ("question", "answers", "gold_passage_ids", "gold_sources", "conflicting_answer", "id")
DERIVED_ID_PREFIX = "q-"


class QuestionSetError(UserInputError):
    """A question set that cannot be read as configured; the message names the file, the field and what to do."""


@dataclass(frozen=True)
class QuestionFields:
    """Which column (or dotted path) holds each field; None: the set has no such field."""

    question: str = "question"
    answers: str | None = "answers"
    gold_passage_ids: str | None = "gold_passage_ids"
    gold_sources: str | None = "gold_sources"
    conflicting_answer: str | None = "conflicting_answer"
    id: str | None = "id"

    def mapped(self) -> dict[str, str]:
        return {name: value for name, value in dataclasses.asdict(self).items() if value}


@dataclass(frozen=True)
class QuestionSetConfig:
    """The keys of a question-set file (strict: an unknown key or a wrongly typed value is an error)."""

    path: str = ""
    format: str | None = None
    fields: dict[str, str | None] = field(default_factory=dict)
    split: str | None = None
    list_separator: str = "|"
    task_type: str = "qa"
    source_meta_field: str = "file_path"


@dataclass(frozen=True)
class QuestionSet:
    """A question set on disk, its format and its field mapping; what ``icr2 compare --dataset`` reads."""

    path: str
    format: str
    fields: QuestionFields = QuestionFields()
    # the fields the user named (mapping or file): a column they name must exist; the defaults may be absent
    explicit: tuple[str, ...] = ()
    split: str | None = None
    list_separator: str = "|"
    task_type: str = "qa"
    config_file: str | None = None
    # the meta field of the index's passages that ``gold_sources`` name (a folder corpus's relative file path)
    source_meta_field: str = "file_path"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise QuestionSetError(f"Question-set format {self.format!r} is not one of {', '.join(FORMATS)}.")
        if not self.list_separator:
            raise QuestionSetError("list_separator must be a non-empty string (default '|').")

    def __str__(self) -> str:
        return self.path

    @classmethod
    def from_options(cls, path: str | os.PathLike, format: str | None = None,
                     fields: Mapping[str, str | None] | None = None, split: str | None = None,
                     list_separator: str = "|", task_type: str = "qa", config_file: str | None = None,
                     source_meta_field: str = "file_path") -> QuestionSet:
        """A question set from a path, a format (None: from the path) and a mapping ``{field: column}`` (a field
        mapped to None or "" is absent from the set)."""
        path = str(path)
        if not Path(path).exists():
            raise QuestionSetError(f"Question set not found: {path}.")
        fields = dict(fields or {})
        from icr2_components.paths import input_path_problem

        problem = input_path_problem(path)
        if problem is not None:  # a FIFO would wait for a writer when it is read
            raise QuestionSetError(f"Question set {problem}; give a regular file or folder that can be read.")
        unknown = sorted(set(fields) - set(FIELDS))
        if unknown:
            raise QuestionSetError(f"Unknown question-set field(s) {unknown}; the fields are {list(FIELDS)} "
                                   "(question is required, the others optional).")
        if "question" in fields and not fields["question"]:
            raise QuestionSetError("The question field cannot be left out: map it to the column holding the question.")
        for name, value in fields.items():
            if value is not None and not isinstance(value, str):
                raise QuestionSetError(f"Field {name!r} must name a column (a string) or be null, got {value!r}.")
        mapping = QuestionFields(**{k: (v or None) for k, v in fields.items()})
        explicit = tuple(k for k, v in fields.items() if v)
        return cls(path, format or format_from_path(path), mapping, explicit, split, list_separator, task_type,
                   config_file, source_meta_field)

    @classmethod
    def from_file(cls, config: str | os.PathLike) -> QuestionSet:
        """A question set from a question-set file (YAML; ``path`` relative to the file)."""
        import yaml

        from icr2_components.strict_mapping import dataclass_from_mapping

        source = Path(config)
        try:
            data = yaml.safe_load(source.read_text(encoding="utf-8"))
        except yaml.YAMLError as error:
            raise QuestionSetError(f"{source} is not valid YAML: {error}") from error
        values = dataclass_from_mapping(QuestionSetConfig, data, f"question-set file {source}", QuestionSetError)
        if not values.path:
            raise QuestionSetError(f"question-set file {source}: key 'path' (the data file or folder) is required.")
        path = Path(values.path)
        if not path.is_absolute():
            path = source.parent / path
        return cls.from_options(path, values.format, values.fields, values.split, values.list_separator,
                                values.task_type, config_file=str(source), source_meta_field=values.source_meta_field)

    def check_columns(self) -> QuestionSet:
        """Refuse now, before any model loads, a table whose columns lack the question or a field the user mapped
        (reads a CSV's header, a Parquet schema, a saved dataset's columns; JSON lines are checked row by row)."""
        if self.format == "csv":
            next(_csv_rows(self, SkipReport(source=self.path)), None)
        elif self.format == "parquet":
            next(_parquet_rows(self), None)
        elif self.format == "hf_dataset":
            _check_columns(self, list(load_saved_dataset(self).column_names))
        return self

    def describe(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "fields": self.fields.mapped(), "split": self.split,
                **({"list_separator": self.list_separator} if self.format == "csv" else {}),
                **({"source_meta_field": self.source_meta_field} if self.fields.gold_sources else {}),
                **({"config_file": self.config_file} if self.config_file else {})}

    def sha256(self) -> str:
        """SHA-256 of the data (every file of a folder, by relative path) and of how it is read (format, fields),
        so that two runs on the same bytes read the same way share it."""
        digest = hashlib.sha256()
        root = Path(self.path)
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for path in files:
            digest.update(path.relative_to(root).as_posix().encode() if root.is_dir() else b"")
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        digest.update(json.dumps({k: v for k, v in self.describe().items() if k not in ("path", "config_file")},
                                 sort_keys=True).encode())
        return digest.hexdigest()


def format_from_path(path: str | os.PathLike) -> str:
    """``hf_dataset`` for a folder, ``csv`` / ``parquet`` by suffix, else ``jsonl``."""
    path = Path(path)
    if path.is_dir():
        return "hf_dataset"
    suffixes = [s.lower() for s in path.suffixes]
    if ".csv" in suffixes or ".tsv" in suffixes:
        return "csv"
    if ".parquet" in suffixes:
        return "parquet"
    return "jsonl"


@dataclass
class QuestionRow:
    """One usable question of a set (validated): ``row`` is its 1-based row (a CSV line number, a JSON line)."""

    id: str
    question: str
    answers: list[str]
    gold_passage_ids: list[str]
    conflicting_answer: str | None
    row: int
    derived_id: bool = False
    gold_sources: list[str] = field(default_factory=list)


def derived_id(question: str) -> str:
    """The stable id of a question without one: ``q-`` and 12 hex digits of the SHA-256 of its text (stripped)."""
    return DERIVED_ID_PREFIX + hashlib.sha256(question.strip().encode("utf-8")).hexdigest()[:12]


_MISSING = object()


def _get(record: Mapping[str, Any], key: str) -> Any:
    """``record[key]``, else the dotted path ``a.b`` into nested mappings; ``_MISSING`` when absent."""
    if key in record:
        return record[key]
    value: Any = record
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


class _BadValue(ValueError):
    pass


def _absent(value: Any) -> bool:
    """No value: not in the record, None, or NaN (a missing float cell, as pandas writes one)."""
    return value is _MISSING or value is None or (isinstance(value, float) and math.isnan(value))


def _scalar_text(value: Any, what: str) -> str:
    """A cell as text: a string stripped, an integer as written, a float whole or not (``1969.0``, what an integer
    column with a null becomes in a Parquet file written by pandas, is ``1969``); a NaN or infinite float, or any
    other type, is a :class:`_BadValue`."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _BadValue(f"{what} is the float {value!r}, not a value")
        return str(int(value)) if value.is_integer() else repr(value)
    raise _BadValue(f"{what} is {type(value).__name__} {str(value)[:40]!r}")


def _text_list(value: Any, what: str, separator: str | None) -> list[str]:
    """A list of non-empty strings from a string (split on ``separator`` in CSV, or a JSON list), a number or a
    list of them; None / missing / "" give []."""
    if _absent(value):
        return []
    if isinstance(value, str):
        text = value.strip()
        if separator is not None and text.startswith("["):
            # a cell opening a JSON list must be one: a broken list (``["a", "b"``) is no answer of its own
            try:
                value = json.loads(text)
            except json.JSONDecodeError as error:
                raise _BadValue(f"{what} looks like a JSON list but is not one ({error.msg} at character "
                                f"{error.pos}): {text[:60]!r}") from error
            if not isinstance(value, list):
                raise _BadValue(f"{what} starts with '[' but is JSON {type(value).__name__}, not a list")
        else:
            parts = text.split(separator) if separator is not None else [text]
            return [p.strip() for p in parts if p.strip()]
    if isinstance(value, (list, tuple)):
        items = [_scalar_text(item, f"an item of {what}") for item in value]
        return [item for item in items if item]
    text = _scalar_text(value, what)
    return [text] if text else []


def _rows(questions: QuestionSet, skips: SkipReport) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """``(row number, record)`` of every row in file order; unreadable rows are counted in ``skips``."""
    if questions.format == "jsonl":
        from icr2_components.records.reading import iter_jsonl

        yield from iter_jsonl(questions.path, skips)  # a line that is no JSON object is counted there
    elif questions.format == "csv":
        yield from _csv_rows(questions, skips)
    elif questions.format == "parquet":
        yield from _parquet_rows(questions)
    else:
        yield from _dataset_rows(questions)


def _check_columns(questions: QuestionSet, columns: list[str]) -> None:
    """A column the user named that the table does not have is an error naming the columns it has."""
    for name in questions.explicit:
        column = getattr(questions.fields, name)
        if column and column not in columns and column.split(".")[0] not in columns:
            raise QuestionSetError(f"{questions.path}: the {name} field is mapped to column {column!r}, which the "
                                   f"{questions.format} has not; its columns are {columns}.")
    if questions.fields.question not in columns and questions.fields.question.split(".")[0] not in columns:
        raise QuestionSetError(f"{questions.path}: no column {questions.fields.question!r} holds the questions; its "
                               f"columns are {columns}. Map it: --field question=COLUMN (or fields: in the "
                               "question-set file).")


def _csv_rows(questions: QuestionSet, skips: SkipReport) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """The rows of a CSV question set by the package's strict CSV reader (an unclosed quote, a malformed row, a
    row of another width or bytes that are not UTF-8 are counted and named; a repeated column is an error)."""
    from icr2_components.records.csv_rows import csv_records

    delimiter = "\t" if ".tsv" in [s.lower() for s in Path(questions.path).suffixes] else ","
    yield from csv_records(questions.path, skips, delimiter, error=QuestionSetError,
                           on_header=lambda header: _check_columns(questions, header))


def _parquet_rows(questions: QuestionSet) -> Iterator[tuple[int, Mapping[str, Any]]]:
    from icr2_components.extras import require_extra

    require_extra("formats", "a Parquet question set", ("pyarrow",))
    import pyarrow.parquet as parquet

    try:
        table = parquet.ParquetFile(questions.path)
    except Exception as error:  # pyarrow raises its own ArrowInvalid for a file that is not Parquet
        raise QuestionSetError(f"{questions.path} is not a Parquet file ({error}).") from error
    from icr2_components.records.csv_rows import check_header

    check_header(list(table.schema_arrow.names), questions.path, QuestionSetError)
    _check_columns(questions, list(table.schema_arrow.names))
    number = 0
    for batch in table.iter_batches(batch_size=1024):
        for record in batch.to_pylist():
            number += 1
            yield number, record


def load_saved_dataset(questions: QuestionSet):
    """The ``datasets.Dataset`` saved to disk at ``questions.path`` (one split of a saved ``DatasetDict``)."""
    from icr2_components.extras import require_extra

    require_extra("formats", "a question set saved by `datasets`", ("datasets",))
    import datasets

    try:
        loaded = datasets.load_from_disk(questions.path)
    except FileNotFoundError as error:
        raise QuestionSetError(f"{questions.path} is not a dataset saved by Dataset.save_to_disk ({error}); give "
                               "--dataset-format for another format.") from error
    if isinstance(loaded, datasets.DatasetDict):
        splits = list(loaded)
        if questions.split is None and len(splits) == 1:
            return loaded[splits[0]]
        if questions.split not in loaded:
            raise QuestionSetError(f"{questions.path} is a DatasetDict with splits {splits}; choose one with "
                                   "--dataset-split (or split: in the question-set file).")
        return loaded[questions.split]
    if questions.split is not None:
        raise QuestionSetError(f"{questions.path} is a single Dataset (no splits); drop the split "
                               f"{questions.split!r}.")
    return loaded


def _dataset_rows(questions: QuestionSet) -> Iterator[tuple[int, Mapping[str, Any]]]:
    dataset = load_saved_dataset(questions)
    _check_columns(questions, list(dataset.column_names))
    yield from enumerate(dataset, start=1)  # a memory-mapped Arrow table, read row by row


def read_question_rows(questions: QuestionSet, skips: SkipReport | None = None) -> tuple[list[QuestionRow],
                                                                                          SkipReport]:
    """Every usable question of the set in file order, and the rows left out by reason (``skips``)."""
    skips = skips if skips is not None else SkipReport(source=questions.path)
    fields = questions.fields
    separator = questions.list_separator if questions.format == "csv" else None
    rows: list[QuestionRow] = []
    seen: set[str] = set()
    for number, record in _rows(questions, skips):
        question = _get(record, fields.question)
        if question is _MISSING or question is None or (isinstance(question, str) and is_blank(question)):
            skips.skip("missing question", number, f"no text in {fields.question!r}")
            continue
        if not isinstance(question, str):
            skips.skip("question is not text", number, f"{fields.question!r} is {type(question).__name__}")
            continue
        try:
            answers = _text_list(_get(record, fields.answers), f"{fields.answers!r}", separator) \
                if fields.answers else []
        except _BadValue as error:
            skips.skip("bad answers", number, str(error))
            continue
        try:
            gold = _text_list(_get(record, fields.gold_passage_ids), f"{fields.gold_passage_ids!r}", separator) \
                if fields.gold_passage_ids else []
        except _BadValue as error:
            skips.skip("bad gold passage ids", number, str(error))
            continue
        try:
            sources = _text_list(_get(record, fields.gold_sources), f"{fields.gold_sources!r}", separator) \
                if fields.gold_sources else []
        except _BadValue as error:
            skips.skip("bad gold sources", number, str(error))
            continue
        conflicting = _get(record, fields.conflicting_answer) if fields.conflicting_answer else _MISSING
        try:
            conflicting = None if _absent(conflicting) else (
                _scalar_text(conflicting, f"{fields.conflicting_answer!r}") or None)
        except _BadValue as error:
            skips.skip("bad conflicting answer", number, str(error))
            continue
        given = _get(record, fields.id) if fields.id else _MISSING
        try:
            question_id = None if _absent(given) else (_scalar_text(given, f"{fields.id!r}") or None)
        except _BadValue as error:
            skips.skip("bad question id", number, str(error))
            continue
        made = question_id is None
        question_id = question_id or derived_id(question)
        if question_id in seen:
            skips.skip("repeated question id", number, question_id)
            continue
        seen.add(question_id)
        rows.append(QuestionRow(question_id, question.strip(), answers, gold, conflicting, number, made, sources))
    return rows, skips


def question_set_counts(rows: list[QuestionRow]) -> dict[str, int]:
    """How many usable questions have each optional field: what each metric can be computed on."""
    return {"questions": len(rows), "with_answers": sum(bool(r.answers) for r in rows),
            "with_gold_passage_ids": sum(bool(r.gold_passage_ids) for r in rows),
            "with_gold_sources": sum(bool(r.gold_sources) for r in rows),
            "with_conflicting_answer": sum(r.conflicting_answer is not None for r in rows),
            "derived_ids": sum(r.derived_id for r in rows)}


__all__ = ["FORMATS", "QuestionFields", "QuestionRow", "QuestionSet", "QuestionSetError", "derived_id",
           "format_from_path", "load_saved_dataset", "question_set_counts", "read_question_rows"]
