"""Evaluating adaptive retrieval on RetrievalQA-format data: adaptive vs. always vs. never retrieval.

Input JSONL, one question per line: ``question``, ``ground_truth`` (list of accepted answers), optional
``context`` (passages: strings or ``{"title", "text"}``), optional ``needs_retrieval`` label (RetrievalQA's
``param_knowledge_answerable`` is read as its negation) and optional ``data_source``.

Each question costs one gate decision and at most two answers (closed-book, Fig. 7; with context, Fig. 8);
adaptive retrieval's answer is whichever of the two its decision picks, so the three modes are compared on
identical generations.
"""

from __future__ import annotations

import os
import typing
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from haystack.dataclasses import ChatMessage

from icr2_components.evaluation.gates.retrieval_decisions import score_retrieval_decisions
from icr2_components.evaluation.metrics.answer_match import answer_match
from icr2_components.records import SkipReport
from icr2_components.records.reading import iter_jsonl
from icr2_components.strict_mapping import TypeCheckError, check_type

CLOSED_BOOK_QA_TEMPLATE = (
    "Please use your own knowledge to answer the questions. Only include the answer in your response and try to "
    "be concise. If you do not know the answer, just say \"I don't know\".\n\nQuestion: {question}\n\nAnswer:"
)
"""RetrievalQA Fig. 7."""

CONTEXT_QA_TEMPLATE = (
    "Please answer the question based on the provided context. Only include the answer in your response and try "
    "to be concise. If you do not know the answer, just say \"I don't know\".\n\nParagraph:\n\n{passages}\n\n"
    "Question: {question}\n\nAnswer:"
)
"""RetrievalQA Fig. 8."""

MODES = ("adaptive", "always", "never")


@dataclass(frozen=True)
class GateEvalRecord:
    question: str
    ground_truth: tuple[str, ...]
    context: tuple[str, ...] = ()
    needs_retrieval: bool | None = None
    source: str = "unknown"


def passage_texts(context: Any) -> list[str]:
    """Context passages as strings: plain strings, or ``{"title", "text"}`` dicts as "title\\ntext"."""
    if context is None:
        return []
    if isinstance(context, (str, dict)):
        context = [context]
    texts = []
    for passage in context:
        if isinstance(passage, str):
            text = passage.strip()
        elif isinstance(passage, dict):
            body = str(passage.get("text") or passage.get("content") or "").strip()
            title = str(passage.get("title") or "").strip()
            text = f"{title}\n{body}" if title and body else body
        else:
            text = ""
        if text:
            texts.append(text)
    return texts


def record_from_json(record: dict) -> GateEvalRecord:
    """One RetrievalQA-format object -> a record; raises ValueError saying what is missing."""
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("empty question")
    key = "ground_truth" if "ground_truth" in record else "answers"
    truths = check_type(record.get(key), str | list[str] | None, f"{key}")
    if isinstance(truths, str):
        truths = [truths]
    truths = tuple(t for t in (truths or []) if t.strip())
    if not truths:
        raise ValueError("no ground_truth answer")
    # a label must be a JSON boolean: "false" is a non-empty string, and reading it as true flips the metrics
    label = check_type(record.get("needs_retrieval"), bool | None, "needs_retrieval")
    # RetrievalQA writes this one as 0/1; true/false is accepted too, anything else refused
    answerable = check_type(
        record.get("param_knowledge_answerable"), bool | typing.Literal[0, 1] | None, "param_knowledge_answerable"
    )
    if label is None and answerable is not None:
        label = not bool(answerable)
    source = str(record.get("data_source") or record.get("source") or "unknown")
    # a passage that is neither a string nor a {title, text} mapping (a number, a nested list) would vanish from the
    # context in silence: the line is counted instead
    context = check_type(record.get("context"), str | dict | list[str | dict] | None, "context")
    return GateEvalRecord(question.strip(), truths, tuple(passage_texts(context)), label, source)


def read_retrievalqa_jsonl(
    path: str | os.PathLike, limit: int | None = None
) -> tuple[list[GateEvalRecord], SkipReport]:
    """Read records, counting malformed lines, empty questions, questions without answers and wrongly typed
    fields (``needs_retrieval: "false"`` is a string, not a boolean: the line is skipped and counted)."""
    skips = SkipReport(source=str(path))
    records: list[GateEvalRecord] = []
    for line_number, raw in iter_jsonl(path, skips):
        try:
            records.append(record_from_json(raw))
        except TypeCheckError as error:
            skips.skip("wrongly typed field", line_number, str(error))
            continue
        except ValueError as error:
            skips.skip(str(error), line_number)
            continue
        if limit is not None and len(records) >= limit:
            break
    return records, skips


def closed_book_messages(question: str) -> list[ChatMessage]:
    return [ChatMessage.from_user(CLOSED_BOOK_QA_TEMPLATE.format(question=question))]


def context_messages(question: str, passages: Sequence[str]) -> list[ChatMessage]:
    return [ChatMessage.from_user(CONTEXT_QA_TEMPLATE.format(question=question, passages="\n\n".join(passages)))]


@dataclass
class GateEvalRow:
    """One question's decision and answers."""

    question: str
    source: str
    needs_retrieval: bool | None
    retrieve: bool
    p_yes: float | None
    closed_book_answer: str | None = None
    context_answer: str | None = None
    closed_book_match: bool | None = None
    context_match: bool | None = None
    demonstrations: list[str] = field(default_factory=list)

    def match(self, mode: str) -> bool | None:
        if mode == "never" or (mode == "adaptive" and not self.retrieve):
            return self.closed_book_match
        return self.context_match


def summarize_rows(rows: Sequence[GateEvalRow]) -> dict[str, dict[str, Any]]:
    """Per mode: decision scores and answer match accuracy (over rows whose needed answer exists)."""
    summary: dict[str, dict[str, Any]] = {}
    labels = [row.needs_retrieval for row in rows]
    for mode in MODES:
        decisions = [row.retrieve if mode == "adaptive" else mode == "always" for row in rows]
        scores = score_retrieval_decisions(decisions, labels).as_dict()
        matches = [row.match(mode) for row in rows]
        answered = [m for m in matches if m is not None]
        scores["match"] = sum(answered) / len(answered) if answered else None
        scores["answered"] = len(answered)
        summary[mode] = scores
    return summary


def summarize_by_source(rows: Sequence[GateEvalRow]) -> dict[str, dict[str, dict[str, Any]]]:
    groups: dict[str, list[GateEvalRow]] = defaultdict(list)
    for row in rows:
        groups[row.source].append(row)
    result = {source: summarize_rows(group) for source, group in sorted(groups.items())}
    result["all"] = summarize_rows(rows)
    return result


def evaluate_gate(
    records: Iterable[GateEvalRecord],
    gate,
    reader=None,
    retriever=None,
    top_k: int = 5,
    answer: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the gate (and, with ``answer``, the reader closed-book and with context) over ``records``.

    ``gate`` is a TimeAwareRetrievalGate (or anything whose ``run(query=...)`` returns a ``decision``);
    ``reader`` a ChatGenerator; ``retriever`` (optional) a component with ``run(query, top_k)`` used for
    questions that carry no ``context``. Questions left without a context answer are counted in ``skips``.
    """
    records = list(records)
    skips = SkipReport(source="gate evaluation")
    if answer and reader is None:
        raise ValueError("answer=True needs a reader (a ChatGenerator such as LocalChatReader).")
    iterator = records
    if progress:
        from tqdm import tqdm

        iterator = tqdm(records, desc="eval-gate", unit="q")
    rows: list[GateEvalRow] = []
    for record in iterator:
        decision = gate.run(query=record.question)["decision"]
        row = GateEvalRow(
            record.question,
            record.source,
            record.needs_retrieval,
            bool(decision["retrieve"]),
            decision.get("p_yes"),
            demonstrations=[d["question"] for d in decision.get("demonstrations", [])],
        )
        if answer:
            reply = reader.run(messages=closed_book_messages(record.question))["replies"][0].text or ""
            row.closed_book_answer, row.closed_book_match = reply, answer_match(reply, record.ground_truth)
            passages = list(record.context)
            if not passages and retriever is not None:
                documents = retriever.run(query=record.question, top_k=top_k)["documents"]
                passages = [d.content for d in documents if d.content]
            if passages:
                reply = (
                    reader.run(messages=context_messages(record.question, passages[:top_k]))["replies"][0].text or ""
                )
                row.context_answer, row.context_match = reply, answer_match(reply, record.ground_truth)
            else:
                skips.skip("no context and no retriever: no with-retrieval answer", detail=record.question[:60])
        rows.append(row)
    return {
        "summary": summarize_by_source(rows),
        "rows": [asdict(row) for row in rows],
        "skips": skips.as_dict(),
        "gate": {"method": getattr(gate, "method", None), "stats": dict(getattr(gate, "stats", {})),
                 "pool_skips": getattr(gate, "pool_skips", {})},
    }


def format_summary_table(summary: dict[str, dict[str, dict[str, Any]]], title: str = "eval-gate"):
    """A rich Table: one row per (source, mode)."""
    from rich.table import Table

    def pct(value):
        return "-" if value is None else f"{100 * value:.1f}"

    table = Table(title=title)
    for column in ("source", "mode", "n", "retrieval rate", "retrieval acc", "precision", "recall", "F1", "match"):
        table.add_column(column, justify="left" if column in ("source", "mode") else "right")
    for source, modes in summary.items():
        for mode, scores in modes.items():
            table.add_row(source, mode, str(scores["count"]), pct(scores["retrieval_rate"]),
                          pct(scores["retrieval_accuracy"]), pct(scores["precision"]), pct(scores["recall"]),
                          pct(scores["f1"]), pct(scores["match"]))
    return table
