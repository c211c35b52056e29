"""The adaptive-retrieval prompts of RetrievalQA (appendix A.7, Fig. 5 and 6) and their rendering.

Demonstrations are written in the same "Question: ... / Answer: [Yes]" form as the judged question, so that
the model continues the pattern; the judged question always comes last.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass

GATE_INSTRUCTION = (
    "Given a question, determine whether you need to retrieve external resources, such as real-time search "
    "engines, Wikipedia, or databases, to answer the question correctly. Only answer \"[Yes]\" or \"[No]\"."
)
"""Fig. 5/6 instruction, verbatim."""

YES_LABEL = "[Yes]"
NO_LABEL = "[No]"


@dataclass(frozen=True)
class Demonstration:
    """One in-context example: a question and whether it needed retrieval ([Yes]) or not ([No])."""

    question: str
    needs_retrieval: bool
    source: str = ""

    @property
    def label(self) -> str:
        return YES_LABEL if self.needs_retrieval else NO_LABEL


def today_line(today: _dt.date) -> str:
    """The TA-ARE time-awareness sentence."""
    return f"Today is {today.isoformat()}."


def format_demonstration(demonstration: Demonstration) -> str:
    return f"Question: {demonstration.question}\nAnswer: {demonstration.label}"


def render_vanilla_prompt(question: str) -> str:
    """Fig. 5: the plain yes/no prompt."""
    return f"{GATE_INSTRUCTION}\n\nQuestion: {question}\n\nAnswer:"


def render_ta_are_prompt(question: str, today: _dt.date | None, demonstrations: Sequence[Demonstration]) -> str:
    """Fig. 6: "Today is <date>." + instruction + demonstrations + the question.

    ``today=None`` drops the date line and an empty ``demonstrations`` drops the examples block, which gives
    the paper's two ablations (Tables 8 and 9).
    """
    parts = []
    instruction = GATE_INSTRUCTION if today is None else f"{today_line(today)} {GATE_INSTRUCTION}"
    parts.append(instruction)
    if demonstrations:
        examples = "\n\n".join(format_demonstration(d) for d in demonstrations)
        parts.append(f"Here are some examples:\n\n{examples}")
    parts.append(f"Question: {question}\n\nAnswer:")
    return "\n\n".join(parts)


DEMONSTRATION_ORDERS = ("yes_first", "no_first")


def interleave_demonstrations(
    yes_examples: Sequence[Demonstration], no_examples: Sequence[Demonstration], order: str = "yes_first"
) -> list[Demonstration]:
    """Yes, No, Yes, No, ... (or No, Yes, ... with ``no_first``) then the rest, so that neither label sits in
    one block. Small models copy the label nearest the question, which is why the order is a parameter."""
    if order not in DEMONSTRATION_ORDERS:
        raise ValueError(f"order must be one of {DEMONSTRATION_ORDERS}, got {order!r}.")
    first, second = (yes_examples, no_examples) if order == "yes_first" else (no_examples, yes_examples)
    ordered: list[Demonstration] = []
    for index in range(max(len(first), len(second))):
        if index < len(first):
            ordered.append(first[index])
        if index < len(second):
            ordered.append(second[index])
    return ordered
