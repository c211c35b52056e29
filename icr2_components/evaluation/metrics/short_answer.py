"""The span of a generated reply that a user would read as "the answer", for exact match.

Exact match (SQuAD/KILT) compares the whole prediction with a gold answer. Extractive readers and the models in
those papers answer with a span; chat models such as SmolLM2 answer with a line of text, often followed by an
explanation, so exact match on the raw reply is 0 for every pipeline. :func:`short_answer` cuts the reply down to
the part a reader would call the answer, by fixed rules applied in this order:

1. the first non-empty line (a line that is only a label, such as "The answer is:", is skipped in favour of the
   next non-empty line);
2. the text after an answer label at its start: "Answer:", "A:", "Short answer:", "Final answer:";
3. announcing lead-ins removed from its start: "The answer is", "The correct answer is", "The answer to the
   question "..." is", "It is", "It's", "It was";
4. the first sentence only: the text up to the first ".", "!" or "?" that ends a sentence (followed by white space
   or the end). A period after a single letter ("J.", "U.S."), after a common abbreviation ("Dr.", "St.", "Jr.",
   "vs.", "etc.") or "No." before a number does not end a sentence, nor does one inside a number ("17.5");
5. surrounding white space, quotes and a final period removed.

The rules never rewrite the answer itself (no question-aware rewriting: "The dog's name is Spike." stays a
sentence and is not exactly "Spike"), so exact match on the short answer stays strict: it credits a reply whose
answer span *is* a gold answer. Example::

    >>> short_answer("The answer is: Cristin Milioti. She played the Mother in season 9.")
    'Cristin Milioti'
"""

from __future__ import annotations

import re

_LABEL = re.compile(r"^(?:(?:short|final|correct)\s+)?(?:answer|a)\s*:\s*", re.IGNORECASE)
_QUOTED = r"""(?:\s*(?:"[^"\n]*"|“[^”\n]*”|'[^'\n]*'))"""
_LEAD_IN = re.compile(
    r"^(?:"
    r"(?:the\s+)?(?:(?:correct|right|short|final)\s+)?answer"
    r"(?:\s+to\s+(?:the|your|this|that)\s+question" + _QUOTED + r"?)?"
    r"\s*(?:is|was|would\s+be)\s*:?"
    r"|it\s+is|it's|it’s|it\s+was"
    r")(?:\s+|$)",
    re.IGNORECASE,
)
_ABBREVIATIONS = {
    "dr", "mr", "mrs", "ms", "st", "mt", "ft", "jr", "sr", "vs", "etc", "inc", "co", "ltd", "corp",
    "gen", "col", "lt", "sgt", "capt", "gov", "sen", "rep", "prof", "rev", "hon", "pres", "approx", "e.g", "i.e",
    "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "fig", "vol", "op",
}
# "No." abbreviates "number" only before a number ("No. 40"); elsewhere it is the answer "No."
_NUMBER_ABBREVIATIONS = {"no", "nos"}
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
_WORD_BEFORE = re.compile(r"([\w.]+)$")
_STRIP = " \t\"'“”‘’`*"


def _is_label_only(line: str) -> bool:
    """A line that announces the answer and holds nothing else ("The answer is:", "Answer:")."""
    rest = _LEAD_IN.sub("", _LABEL.sub("", line, count=1), count=1)
    return rest.strip(_STRIP + ":") == "" and rest != line


def _first_sentence(text: str) -> str:
    for match in _SENTENCE_END.finditer(text):
        end = match.start()
        if text[end] == ".":
            before = _WORD_BEFORE.search(text[:end])
            word = before.group(1).lower() if before else ""
            last = word.rsplit(".", 1)[-1]
            if len(last) == 1 and last.isalpha():  # an initial: "J.", "U.S."
                continue
            if word in _ABBREVIATIONS or last in _ABBREVIATIONS:
                continue
            if word in _NUMBER_ABBREVIATIONS and text[end + 1:].lstrip()[:1].isdigit():
                continue
        return text[:end + 1]
    return text


def short_answer(reply: str) -> str:
    """The answer span of a generated reply (rules in the module docstring); "" for an empty reply."""
    lines = [line.strip() for line in (reply or "").splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[0]
    if _is_label_only(line) and len(lines) > 1:
        line = lines[1]
    line = _LABEL.sub("", line, count=1)
    previous = None
    while previous != line:  # "The answer is: Answer: X" and similar stacks
        previous = line
        line = _LEAD_IN.sub("", line, count=1).lstrip(" :")
        line = _LABEL.sub("", line, count=1)
    line = _first_sentence(line).strip(_STRIP)
    if line.endswith(".") and not _first_sentence_keeps_period(line):
        line = line[:-1]
    return line.strip(_STRIP)


def _first_sentence_keeps_period(text: str) -> bool:
    """A final period that belongs to an abbreviation or initial ("Washington, D.C.", "Jr.") is kept."""
    before = _WORD_BEFORE.search(text[:-1])
    word = before.group(1).lower() if before else ""
    last = word.rsplit(".", 1)[-1]
    return (len(last) == 1 and last.isalpha()) or word in _ABBREVIATIONS or last in _ABBREVIATIONS
