"""The retrieve-then-generate reply format (ICR2 section 4.1, figure 8): the targets a reader is fine-tuned on
(``format_target``) and the parser of what a fine-tuned reader writes (``parse_generation``).

Three methods, all answering the same CiC prompt (``render_cic_prompt``):

- ``da`` (Direct Answer): ``The answer is {answer}.``
- ``rta`` (Retrieve-Then-Answer): the reader first copies the gold passages inside the retrieval markers, then
  answers: ``<RETRIEVAL> The relevant passage for the question is, “{text}” </RETRIEVAL> The correct answer is
  {answer}.``
- ``cci`` (Cite-Context-ID): the reader cites the gold passage ids instead of copying them:
  ``<RETRIEVAL> The relevant passage ID for this question is PSG004. </RETRIEVAL> The correct answer is {answer}.``

Several gold passages are listed in context order. :func:`parse_generation` turns a reply back into retrieved
passage ids and an answer (RTA copies are matched to the context passage with the highest token overlap).

Usage:
    >>> target = format_target("cci", "Paris", [("PSG004", "Paris is the capital of France.")])
    >>> parse_generation(target, {"PSG004": "Paris is the capital of France."}).answer
    'Paris'
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

RETRIEVAL_START = "<RETRIEVAL>"
RETRIEVAL_END = "</RETRIEVAL>"
RETRIEVAL_TOKENS = (RETRIEVAL_START, RETRIEVAL_END)
SFT_METHODS = ("da", "rta", "cci")
"""Targets a reader is fine-tuned on. ``retrieval_head`` (section 4.3) is a training method too, see recipe.py."""

_ANSWER_LEADS = {"qa": "The correct answer is", "fact_verification": "The judgement is", "dialogue": "The response is"}
_DIRECT_LEADS = {"qa": "The answer is", "fact_verification": "The judgement is", "dialogue": "The response is"}
_ID_PATTERN = re.compile(r"PSG\d+")
_QUOTED = re.compile(r"“(.*?)”", re.DOTALL)


class UnknownMethodError(ValueError):
    """A method name that is not one of the SFT methods."""


def check_method(method: str) -> str:
    if method not in SFT_METHODS:
        raise UnknownMethodError(f"Unknown SFT method {method!r}; choose one of {list(SFT_METHODS)} (ICR2 figure 8).")
    return method


def _answer_sentence(lead: str, answer: str) -> str:
    answer = answer.strip()
    return f"{lead} {answer}" + ("" if answer.endswith((".", "!", "?")) else ".")


def format_target(method: str, answer: str, gold: Sequence[tuple[str, str]], task_type: str = "qa") -> str:
    """The text the reader learns to write after the prompt (its end-of-turn token is added by the encoder).

    :param gold: ``(passage_id, text)`` of the gold passages, in context order; needed for ``rta`` and ``cci``.
    """
    check_method(method)
    if task_type not in _ANSWER_LEADS:
        raise ValueError(f"Unknown task_type {task_type!r}; choose one of {list(_ANSWER_LEADS)}.")
    if not isinstance(answer, str) or not answer.strip():
        raise ValueError("A training target needs a non-empty answer.")
    if method == "da":
        return _answer_sentence(_DIRECT_LEADS[task_type], answer)
    if not gold:
        raise ValueError(f"Method {method!r} needs at least one gold passage in the context.")
    if method == "rta":
        quoted = " ".join(f"“{text.strip()}”" for _, text in gold)
        lead = (
            "The relevant passage for the question is,"
            if len(gold) == 1
            else "The relevant passages for the question are,"
        )
        retrieval = f"{lead} {quoted}"
    else:
        ids = ", ".join(pid for pid, _ in gold)
        lead = (
            "The relevant passage ID for this question is"
            if len(gold) == 1
            else "The relevant passage IDs for this question are"
        )
        retrieval = f"{lead} {ids}."
    return f"{RETRIEVAL_START} {retrieval} {RETRIEVAL_END} {_answer_sentence(_ANSWER_LEADS[task_type], answer)}"


@dataclass
class ParsedGeneration:
    """A reply split into its retrieval step and its answer.

    ``retrieved_ids``: context passages the reply retrieved (cited ids, or copies matched to passages);
    ``unmatched``: cited ids not in the context, or copies matching no passage; ``has_retrieval``: both markers
    were found in order.
    """

    answer: str
    retrieved_ids: list[str] = field(default_factory=list)
    retrieval_text: str = ""
    has_retrieval: bool = False
    unmatched: list[str] = field(default_factory=list)


def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def overlap_f1(a: str, b: str) -> float:
    """Token-overlap F1 of two texts (SQuAD style, on lower-cased word tokens)."""
    ta, tb = _tokens(a), _tokens(b)
    if not ta or not tb:
        return 0.0
    common = sum((Counter(ta) & Counter(tb)).values())
    if not common:
        return 0.0
    precision, recall = common / len(ta), common / len(tb)
    return 2 * precision * recall / (precision + recall)


def match_copied_passage(copy: str, context: Mapping[str, str], threshold: float = 0.5) -> str | None:
    """The context passage id a copied text matches best (token F1 >= ``threshold``), else None."""
    best_id, best = None, threshold
    for pid, text in context.items():
        score = overlap_f1(copy, text)
        if score >= best:
            best_id, best = pid, score
    return best_id


def strip_answer_lead(text: str) -> str:
    text = text.strip()
    for lead in sorted(set(_ANSWER_LEADS.values()) | set(_DIRECT_LEADS.values()), key=len, reverse=True):
        if text.lower().startswith(lead.lower()):
            text = text[len(lead):].strip()
            break
    return text[:-1].strip() if text.endswith(".") else text


def parse_generation(text: str, context: Mapping[str, str] | None = None, threshold: float = 0.5) -> ParsedGeneration:
    """Split a reply into retrieved passage ids and the answer.

    :param context: passage id -> passage text of the prompt; ids not in it are reported as ``unmatched``, and
        RTA copies are matched against it. Without it, cited ids are returned as written.
    """
    start, end = text.find(RETRIEVAL_START), text.find(RETRIEVAL_END)
    if start < 0 or end < start:
        return ParsedGeneration(answer=strip_answer_lead(text))
    body = text[start + len(RETRIEVAL_START):end].strip()
    answer = strip_answer_lead(text[end + len(RETRIEVAL_END):])
    retrieved: list[str] = []
    unmatched: list[str] = []
    cited = _ID_PATTERN.findall(body)
    copies = _QUOTED.findall(body) or ([] if cited else [body])
    for pid in cited:
        if context is None or pid in context:
            retrieved.append(pid)
        else:
            unmatched.append(pid)
    for copy in copies:
        pid = match_copied_passage(copy, context or {}, threshold)
        if pid is None:
            unmatched.append(copy[:60])
        elif pid not in retrieved:
            retrieved.append(pid)
    return ParsedGeneration(answer, list(dict.fromkeys(retrieved)), body, True, unmatched)
