"""CUB context types for QA: gold, conflicting (gold with its answer replaced) and irrelevant passages.

- gold: the gold passage (the first gold passage that contains a gold answer, else the first gold passage);
- conflicting: the gold passage with every occurrence of the answer replaced by a plausible substitute of the
  same type, another answer from the dataset (a year for a year, a number for a number, a capitalised name
  for a name, a lower-case phrase for a phrase), so a faithful reader answers the substitute;
- irrelevant: the best-ranked retrieved (or benchmark confounder) passage that is not gold and contains no
  gold answer.

A question for which a context type cannot be built is counted under a reason, never dropped silently.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from haystack import Document

# Building contexts is exclusion, not scoring: like the corpus builder, it uses the looser normalisation
# (punctuation to spaces, accents folded); replies are scored with the official one
# (evaluation/metrics/answer_match.py).
from icr2_components.text.normalization import normalize_text

_YEAR = re.compile(r"^(1\d{3}|20\d{2})$")
_NUMBER = re.compile(r"^[\d.,\s]+(%|\s?\w+)?$")
_MONTHS = {"january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"}


def answer_type(answer: str) -> str:
    """`year`, `date`, `number`, `name` (every word capitalised) or `phrase`."""
    text = answer.strip()
    if _YEAR.match(text):
        return "year"
    words = text.lower().replace(",", " ").split()
    if any(w in _MONTHS for w in words) and any(w.isdigit() for w in words):
        return "date"
    if text and text[0].isdigit() and _NUMBER.match(text):
        return "number"
    alpha = [w for w in text.split() if w[:1].isalpha()]
    if alpha and all(w[0].isupper() for w in alpha if w.lower() not in {"of", "the", "and", "de", "in"}):
        return "name"
    return "phrase"


def _stable_rank(key: str, candidate: str) -> str:
    return hashlib.sha256(f"{key}\x00{candidate}".encode()).hexdigest()


def choose_substitute(question_id: str, answers: Sequence[str], passage_text: str, pool: Iterable[str]) -> str | None:
    """A deterministic pool answer of the same type as ``answers[0]`` that is none of the gold answers and does
    not already occur in the passage; None when the pool has no such answer."""
    if not answers:
        return None
    wanted = answer_type(answers[0])
    gold = {normalize_text(a) for a in answers}
    passage = normalize_text(passage_text)
    candidates = sorted(
        {c for c in pool if answer_type(c) == wanted and normalize_text(c) and normalize_text(c) not in gold
         and normalize_text(c) not in passage},
        key=lambda c: _stable_rank(question_id, c),
    )
    return candidates[0] if candidates else None


def find_answer_in_text(text: str, answers: Sequence[str]) -> str | None:
    """The first answer that occurs literally (case-insensitive) in the text."""
    lowered = text.lower()
    for answer in answers:
        if answer.strip() and answer.lower() in lowered:
            return answer
    return None


def replace_answer(text: str, answer: str, substitute: str) -> str:
    """Replace every case-insensitive occurrence of ``answer`` in ``text`` by ``substitute``."""
    return re.sub(re.escape(answer), lambda _: substitute, text, flags=re.IGNORECASE)


@dataclass
class ContextSet:
    """The passages one question is asked with, per context type (absent types carry a reason)."""

    gold: list[Document] | None = None
    conflicting: list[Document] | None = None
    conflicting_answer: str | None = None
    irrelevant: list[Document] | None = None
    corpus: list[Document] | None = None  # an ICR2 record's whole corpus in context (compare's ``corpus`` type)
    reasons: dict[str, str] | None = None

    def documents(self, context_type: str) -> list[Document] | None:
        return getattr(self, context_type)


def pick_gold_passage(gold_documents: Sequence[Document], answers: Sequence[str]) -> Document | None:
    for document in gold_documents:
        if document.content and find_answer_in_text(document.content, answers):
            return document
    return gold_documents[0] if gold_documents else None


def pick_irrelevant_passage(
    candidates: Sequence[Document], answers: Sequence[str], gold_ids: set[str]
) -> Document | None:
    """The first candidate that is not gold and contains no normalised gold answer."""
    normalized_answers = [normalize_text(a) for a in answers if normalize_text(a)]
    for document in candidates:
        text = normalize_text(document.content or "")
        if document.id in gold_ids or not text:
            continue
        if not any(a in text for a in normalized_answers):
            return document
    return None


def build_context_set(
    question_id: str,
    answers: Sequence[str],
    gold_documents: Sequence[Document],
    irrelevant_candidates: Sequence[Document],
    substitute_pool: Iterable[str],
    corpus: Sequence[Document] | None = None,
    conflicting_answer: str | None = None,
) -> ContextSet:
    """Build the gold, conflicting and irrelevant contexts of one question (one passage each, as in CUB), and
    ``corpus``: an ICR2 record's whole corpus in context, as given (gold among confounders, in record order).
    ``conflicting_answer``: the substitute a question set gives (else one is drawn from ``substitute_pool``).
    A question without gold answers gets none of the three (nothing could score them, nor check that a passage
    is irrelevant)."""
    reasons: dict[str, str] = {}
    result = ContextSet(reasons=reasons, corpus=list(corpus) if corpus else None)
    if not corpus:
        reasons["corpus"] = "no corpus in context (the dataset is not an ICR2 benchmark file)"
    if not [a for a in answers if a.strip()]:
        reasons["gold"] = reasons["conflicting"] = reasons["irrelevant"] = "no gold answers"
        return result
    gold = pick_gold_passage(gold_documents, answers)
    if gold is None:
        reasons["gold"] = reasons["conflicting"] = "no gold passage"
    else:
        result.gold = [gold]
        found = find_answer_in_text(gold.content or "", answers)
        if found is None or conflicting_answer is None:
            substitute = (choose_substitute(question_id, answers, gold.content or "", substitute_pool) if found
                          else None)
        else:
            given = normalize_text(conflicting_answer)
            substitute = conflicting_answer if given and given not in {normalize_text(a) for a in answers} else None
        if found is None:
            reasons["conflicting"] = "gold passage does not contain the answer"
        elif substitute is None and conflicting_answer is not None:
            reasons["conflicting"] = "the conflicting answer given is one of the gold answers"
        elif substitute is None:
            reasons["conflicting"] = f"no substitute of type {answer_type(answers[0])}"
        else:
            changed = Document(
                id=f"{gold.id}-conflicting",
                content=replace_answer(gold.content, found, substitute),
                meta=dict(gold.meta, replaced_answer=found, substitute=substitute),
            )
            result.conflicting, result.conflicting_answer = [changed], substitute
    irrelevant = pick_irrelevant_passage(irrelevant_candidates, answers, {d.id for d in gold_documents})
    if irrelevant is None:
        reasons["irrelevant"] = "no retrieved passage without the answer"
    else:
        result.irrelevant = [irrelevant]
    return result
