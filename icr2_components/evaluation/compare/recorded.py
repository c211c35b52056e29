"""An ``icr2 compare`` report re-rendered from its answer cache as written, asking no model.

``icr2 compare --report-only`` reports on the answers the cache holds under the pipelines' hashes *now*; once a
pipeline's YAML (or an index or artifact it reads) has changed, its hash has too and a committed run's answers are
no longer found. ``rerender_as_recorded`` reads instead the answers of the pipelines and hashes the committed
``report.json`` names (``run.pipelines``), for its questions (``run.question_ids``) and context types, and scores
them the way compare does: with the labels of the question set named in ``run.dataset`` as it is now
(``cache.with_labels``), leaving out a record asked another question text, given other passages or another token
budget (``cache.reuse_decision``), and, for a report-only run, keeping the questions answered by every pipeline
under every context type. The run's own facts (settings, counters, timings) stay as they were recorded.
``figure_differences`` names every figure of two reports that differs, leaving out what describes a run rather
than its results (``RUN_TIME_KEYS``).

Usage:
    >>> from icr2_components.evaluation.compare.recorded import figure_differences, rerender_as_recorded
    >>> fresh = rerender_as_recorded("bench/results/ab_cub/report.json", "/tmp/ab_cub")  # doctest: +SKIP
    >>> figure_differences(json.load(open("bench/results/ab_cub/report.json")), fresh)  # doctest: +SKIP
    []
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icr2_components.errors import UserInputError
from icr2_components.evaluation.compare.cache import (
    LABEL_FIELDS,
    NO_CONTEXT,
    STALE,
    AnswerCache,
    context_sha,
    resolve_cache_path,
    reuse_decision,
    with_labels,
)

#: keys that describe a run (where, when, how long) rather than its results: left out of ``figure_differences``
RUN_TIME_KEYS = frozenset({"run", "files", "out", "cache", "path", "paths", "timestamp", "started", "finished",
                           "created", "seconds", "wall_seconds", "generation_seconds", "answer_wall_seconds"})
#: the folder beside the repository holding the shared data files, where a recorded dataset path may not exist
SHARED_DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"


@dataclass(frozen=True)
class RecordedPipeline:
    """What the report code reads of a pipeline, taken from its recorded answers: its name and hash, whether it
    reads passages (``context_input``) and is given them under ``open`` (``documents_input``, the oracle), and
    its YAML's ``metadata`` (``data``) where the file still exists."""

    name: str
    hash: str
    context_input: str | None
    documents_input: bool
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Rerendered:
    """A re-rendered report and what it was made from: answers read from the cache for the recorded pipelines,
    questions and context types (``answers_read``), answers asked now (always 0), answers left out as stale (by
    reason), answers scored with labels other than those written (``labels_changed``), the question set read and
    whether its SHA-256 is the recorded one."""

    report: dict[str, Any]
    answers_read: int
    asked: int = 0
    left_out: dict[str, int] = field(default_factory=dict)
    labels_changed: int = 0
    dataset: str = ""
    dataset_matches: bool = True


def recorded_dataset(recorded: str | None, repo: Path | None = None) -> Path:
    """The question-set file a report names (``run.dataset``): the path as recorded when it exists, else one of
    that name in the repository (relative paths) or the shared data folder.

    :raises UserInputError: no such file anywhere.
    """
    from icr2_components.kilt.questions import question_source

    if recorded is None:
        return Path(question_source(None))
    path = Path(recorded)
    candidates = [path, *((repo / path,) if repo is not None and not path.is_absolute() else ()),
                  SHARED_DATA / path.name]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise UserInputError(f"The report's question set {recorded} is not there, nor {SHARED_DATA / path.name}: "
                         "put the file back (or pass dataset=) to re-render the report.")


def _pipelines(run: dict[str, Any], records: Sequence[dict], repo: Path | None) -> list[RecordedPipeline]:
    """The recorded pipelines, in the report's order, described from their answers (``RecordedPipeline``)."""
    import yaml

    pipelines = []
    for name, info in run["pipelines"].items():
        own = [r for r in records if r["pipeline_hash"] == info["hash"]]
        reads = any(r.get("reads_context") for r in own)
        given = any(r["context_type"] == "open" and r.get("context_sha") for r in own)
        data: dict[str, Any] = {}
        file = Path(info.get("file") or "")
        file = file if file.is_absolute() or repo is None else repo / file
        if file.is_file():  # only the metadata (the technique names the oracle); the components may have changed
            data = {"metadata": (yaml.safe_load(file.read_text(encoding="utf-8")) or {}).get("metadata") or {}}
        pipelines.append(RecordedPipeline(name, info["hash"], "documents" if reads else None, given, data))
    return pipelines


def _expected_sha(record: dict, question: Any, contexts: Any) -> str | None:
    """The ``context_sha`` compare gives this record's question and context type now (None: open retrieval)."""
    if record["context_type"] == "open":
        return context_sha(question.gold_documents) if record.get("context_sha") else None
    return context_sha(contexts.documents(record["context_type"]))


def _as_written(cache: Path, pipelines: dict[str, str], question_ids: Sequence[str], types: Sequence[str]
                ) -> list[dict]:
    """The cache's records of these pipelines (name -> hash), questions and context types, with the labels they
    were written with, each named by its recorded pipeline."""
    by_hash = {digest: name for name, digest in pipelines.items()}
    wanted = set(question_ids)
    return [{**r, "pipeline": by_hash[r["pipeline_hash"]]} for r in AnswerCache(cache, writable=False)
            if r["pipeline_hash"] in by_hash and r["question_id"] in wanted and r["context_type"] in types]


def _complete_as_written(records: list[dict], question_ids: Sequence[str], specs: Sequence[RecordedPipeline],
                         types: Sequence[str]) -> tuple[list[dict], dict[str, int]]:
    """A report-only run's questions answered (without error) by every pipeline under every context type given
    to that question (a controlled type whose records say no context was built, ``NO_CONTEXT``, is not asked)."""
    answered: dict[str, set] = {}
    not_given: dict[str, set] = {}
    for r in records:
        if r["context_type"] != "open" and r.get("context_sha") == NO_CONTEXT:
            not_given.setdefault(r["question_id"], set()).add(r["context_type"])
        if not r.get("error"):
            answered.setdefault(r["question_id"], set()).add((r["pipeline_hash"], r["context_type"]))
    complete = {q for q in question_ids
                if {(s.hash, t) for s in specs for t in types if t not in not_given.get(q, set())}
                <= answered.get(q, set())}
    kept = [r for r in records if r["question_id"] in complete]
    return kept, {"complete_questions": len(complete), "incomplete_questions": len(question_ids) - len(complete)}


def recorded_records(cache: str | Path, pipelines: dict[str, str], dataset: str | Path, question_ids: Sequence[str],
                     context_types: Sequence[str], max_new_tokens: int | None = None, index: str = "kilt-sample"
                     ) -> tuple[list[Any], dict[str, Any], list[dict], dict[str, int], int]:
    """The answer records of ``cache`` written under ``pipelines`` (name -> recorded hash) for these questions and
    context types, scored the way compare scores them: each named by its recorded pipeline and carrying the labels
    of the question set ``dataset`` now; a record asked another question text, given other passages or another
    budget left out (as a report-only run does).

    :returns: the questions read, their contexts by id, the records, the records left out by reason, and how many
        records carry other labels than they were written with.
    """
    from icr2_components.evaluation.compare.run import _build_contexts, gold_position, question_labels
    from icr2_components.kilt.questions import read_compare_questions

    questions, _, _ = read_compare_questions(str(dataset), index=index, ids=list(question_ids))
    by_id = {q.id: q for q in questions}
    contexts = _build_contexts(questions, str(dataset))
    by_hash = {digest: name for name, digest in pipelines.items()}
    records, left_out, labels_changed = [], {}, 0
    for record in AnswerCache(cache, writable=False):
        question = by_id.get(record["question_id"])
        if record["pipeline_hash"] not in by_hash or question is None or record["context_type"] not in context_types:
            continue
        decision = reuse_decision(record, _expected_sha(record, question, contexts[question.id]), max_new_tokens,
                                  question.query)
        if decision in STALE:  # as compare's report-only run leaves it out
            left_out[decision] = left_out.get(decision, 0) + 1
            continue
        record = {**record, "pipeline": by_hash[record["pipeline_hash"]]}
        labels = question_labels(question, contexts[question.id], record["context_type"])
        if any(record.get(k) != labels[k] for k in LABEL_FIELDS):
            labels_changed += 1
            record = with_labels(record, labels)
            record["gold_position"] = gold_position(record)
        records.append(record)
    return questions, contexts, records, left_out, labels_changed


def rerender_as_recorded(report_path: str | Path, out_dir: str | Path | None = None, dataset: str | Path | None = None,
                         cache: str | Path | None = None, index: str = "kilt-sample",
                         repo: str | Path | None = None, labels: str = "question_set") -> Rerendered:
    """Re-render a committed compare ``report.json`` from its answer cache as written (module doc).

    :param report_path: the committed ``report.json`` of an ``icr2 compare`` run.
    :param out_dir: where to write the re-rendered report (report.json/.md/.html and PNGs); None: not written.
    :param dataset: the question set to score with (default: the one the report names, ``recorded_dataset``).
    :param cache: the answer cache (default: ``answers.jsonl`` or ``answers.jsonl.gz`` beside the report).
    :param index: the passage index KILT questions take their gold passages from.
    :param repo: the folder relative paths in the report are relative to (default: the current one).
    :param labels: ``"question_set"`` (default): score with the labels of the question set now, as compare does;
        ``"as_written"``: with the labels each record was written with, reading no question set and no index (the
        contexts not built are the report's ``run.missing_contexts``; no record is checked for staleness).
    :returns: the re-rendered report and what it was made from (``Rerendered``).
    :raises UserInputError: the report is not a compare run's, or its question set or cache is missing.
    """
    from icr2_components.evaluation.compare.held_out import dataset_sha256
    from icr2_components.evaluation.compare.run import _complete_questions_only, _missing_contexts
    from icr2_components.evaluation.reports.compare_report import build_report

    report_path = Path(report_path)
    committed = json.loads(report_path.read_text(encoding="utf-8"))
    run = committed.get("run") or {}
    if not isinstance(run.get("pipelines"), dict) or "question_ids" not in run or "context_types" not in run:
        raise UserInputError(f"{report_path} is not an icr2 compare report (no run.pipelines, run.question_ids or "
                             "run.context_types).")
    if labels not in ("question_set", "as_written"):
        raise UserInputError(f"labels takes 'question_set' or 'as_written', got {labels!r}.")
    base = Path(repo) if repo is not None else Path.cwd()
    cache_path = resolve_cache_path(cache if cache is not None else report_path.parent / "answers.jsonl")
    if not cache_path.is_file():
        raise UserInputError(f"{report_path}: no answer cache beside it ({cache_path}); pass cache=.")
    types = list(run["context_types"])
    hashes = {name: info["hash"] for name, info in run["pipelines"].items()}
    if labels == "as_written":
        source, left_out, labels_changed = None, {}, 0
        records = _as_written(cache_path, hashes, run["question_ids"], types)
        not_built = run.get("missing_contexts") or {}
    else:
        source = Path(dataset) if dataset is not None else recorded_dataset(run.get("dataset"), base)
        questions, contexts, records, left_out, labels_changed = recorded_records(
            cache_path, hashes, source, list(run["question_ids"]), types, run.get("max_new_tokens"), index)
        not_built = _missing_contexts(contexts, types)
    answers_read = len(records)
    specs = _pipelines(run, records, base)
    partial = None
    if run.get("report_only"):
        records, partial = (_complete_questions_only(records, questions, specs, types, contexts) if source
                            else _complete_as_written(records, run["question_ids"], specs, types))
    report = build_report(records, specs, types, baseline=(committed.get("paired") or {}).get("baseline"),
                          seed=(run.get("seeds") or {}).get("stats_seed", 0),
                          questions=partial["complete_questions"] if partial else len(run["question_ids"]),
                          not_built=None if partial else not_built)
    report["run"] = {**run, "rendered_as_recorded": {
        "cache": str(cache_path), "dataset": str(source) if source else None, "labels": labels,
        "answers_read": answers_read, "asked": 0, "left_out": left_out, "labels_changed": labels_changed}}
    if out_dir is not None:
        from icr2_components.evaluation.reports.rendering import write_report

        write_report(report, out_dir)
    if source is None:
        return Rerendered(report, answers_read, dataset="", dataset_matches=True)
    recorded_sha = run.get("dataset_sha256")
    return Rerendered(report, answers_read, 0, left_out, labels_changed, str(source),
                      recorded_sha is None or dataset_sha256(str(source)) == recorded_sha)


def figure_differences(committed: Any, fresh: Any, ignore: frozenset[str] = RUN_TIME_KEYS, where: str = "",
                       limit: int = 20) -> list[str]:
    """Where two reports' figures differ (``section.key.key``: committed -> fresh), keys in ``ignore`` left out at
    every level; at most ``limit`` places.

    :returns: the places that differ; empty when every figure is identical.
    """
    differences: list[str] = []
    if isinstance(committed, dict) and isinstance(fresh, dict):
        for key in sorted(set(committed) | set(fresh), key=str):
            if key in ignore:
                continue
            place = f"{where}.{key}" if where else str(key)
            if key not in committed or key not in fresh:
                differences.append(f"{place}: only in the {'fresh' if key in fresh else 'committed'} report")
            else:
                differences += figure_differences(committed[key], fresh[key], ignore, place, limit)
            if len(differences) >= limit:
                break
    elif isinstance(committed, list) and isinstance(fresh, list) and len(committed) == len(fresh):
        for number, (old, new) in enumerate(zip(committed, fresh, strict=True)):
            differences += figure_differences(old, new, ignore, f"{where}[{number}]", limit)
            if len(differences) >= limit:
                break
    elif committed != fresh:
        differences.append(f"{where}: {json.dumps(committed)[:80]} -> {json.dumps(fresh)[:80]}")
    return differences[:limit]
