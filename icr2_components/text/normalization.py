"""Two text normalisations, kept apart on purpose: the official answer normalisation that every scorer uses, and
a looser one that only the corpus builder's answer-string exclusion (and other dedup/exclusion tests) uses.

**Scoring** (``normalize_answer``): the ``normalize_answer`` of the SQuAD v1.1 evaluation script, which KILT's
``kilt/eval_downstream.py`` and Lost in the Middle's ``best_subspan_em`` use unchanged: lower case; every
character of Python's ``string.punctuation`` *removed* (not replaced by a space, so "U.S.A." -> "usa" and
"Eiffel-Tower" -> "eiffeltower"); the articles a/an/the removed as whole words; white space collapsed. Other
characters, accents included, are kept ("Röntgen" stays "röntgen"). ``fold_accents=True`` additionally strips
accents' combining marks first (a named, non-default option: the official scorers do not fold).

**Exclusion** (``normalize_text``, ``normalized_answers``, ``contains_any``, ``contains_answer``): looser, and
never used to score a reply. Punctuation (including typographic quotes and dashes) becomes a space and accents
are folded, so "Rontgen" matches "Röntgen". The corpus-in-context builder drops a confounder that "contains an
answer" by this test (a plain substring test, the way Lost in the Middle and RetrievalQA decide containment); it
errs on the side of a match ("10" in "1000"), which drops a confounder too many rather than keeping one that
holds the answer. The two normalisations disagree on a few strings (the exclusion test does not find "usa" in
"U.S.A."), so a kept confounder is answer-free by the builder's test, not necessarily by the scorer's.
"""

from __future__ import annotations

import re
import string
import unicodedata

# the combining-mark blocks (accents left over by NFKD); a regex is much faster than a per-character test
_COMBINING = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# official: the characters of string.punctuation are deleted (translate with a deletion table == the SQuAD
# script's "".join(ch for ch in text if ch not in set(string.punctuation)))
_DELETE_PUNCTUATION = str.maketrans("", "", string.punctuation)
# exclusion only: punctuation, typographic quotes and dashes become spaces
_PUNCTUATION_TO_SPACE = str.maketrans({ch: " " for ch in string.punctuation + "‘’“”–—"})


def strip_accents(text: str) -> str:
    """``"Röntgen" -> "Rontgen"``: NFKD, then the combining marks removed (ASCII text is returned unchanged)."""
    if text.isascii():
        return text
    return _COMBINING.sub("", unicodedata.normalize("NFKD", text))


def normalize_answer(text: str, fold_accents: bool = False) -> str:
    """The official SQuAD v1.1 / KILT answer normalisation (``"The U.S.A.!" -> "usa"``), used by every scorer.

    Lower case, ``string.punctuation`` removed, articles a/an/the removed as whole words, white space collapsed,
    in the SQuAD script's order. ``fold_accents=True`` strips accents first ("Röntgen" -> "rontgen"); the
    default keeps them, as the official scripts do.
    """
    if fold_accents:
        text = strip_accents(text)
    text = text.lower()
    text = text.translate(_DELETE_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def normalize_text(text: str) -> str:
    """The corpus builder's loose normalisation, for exclusion and near-duplicate tests only, never for scoring.

    Accents folded, lower case, punctuation (and typographic quotes/dashes) turned into spaces, articles removed,
    white space collapsed: ``"The  Eiffel-Tower, in PARIS!" -> "eiffel tower in paris"``. Scorers use
    :func:`normalize_answer` (the official normalisation) instead.
    """
    text = strip_accents(text)
    text = text.lower()
    text = text.translate(_PUNCTUATION_TO_SPACE)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def normalized_answers(answers: list[str] | None) -> list[str]:
    """Loosely normalised (``normalize_text``), non-empty, distinct answers, for the builder's exclusion test."""
    result: list[str] = []
    for answer in answers or []:
        norm = normalize_text(answer)
        if norm and norm not in result:
            result.append(norm)
    return result


def contains_any(normalized_text: str, normalized_answer_list: list[str]) -> bool:
    """Whether any loosely normalised answer is a substring of the loosely normalised text (exclusion only)."""
    return any(answer in normalized_text for answer in normalized_answer_list)


def contains_answer(text: str, answers: list[str] | None) -> bool:
    """The builder's loose containment test, ``contains_answer("The Eiffel Tower, Paris.", ["paris"]) -> True``.

    For excluding passages that hold an answer, never for scoring a reply: score with
    ``icr2_components.evaluation.metrics.answer_match.answer_match`` (Lost in the Middle's ``best_subspan_em``).
    """
    return contains_any(normalize_text(text), normalized_answers(answers))
