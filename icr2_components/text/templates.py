"""Corpus-in-context (CiC) prompt templates for the three ICR2 task types (ICR2 Table 8, appendix B).

The paper writes the templates for Mistral (``[INST] ... [/INST]``); here the instruction, corpus and query
form one user message and the reader's own chat template supplies the turn markers. Each passage is
rendered as in ICR2 Table 1::

    ID: PSG001
    Title: Redwood National and State Parks
    Context: Scenes set on the forest moon Endor ...

and passages are separated by a blank line. The layout of a QA prompt (Table 8)::

    [{answer instruction}         <- only with answer_instruction=NAME (see ANSWER_INSTRUCTIONS)
    ]
    Please answer the following question given the following passages:
    [Question: {query}            <- only with query_aware=True (Lost in the Middle, section 4.2)
    ]
    {corpus}

    Question: {query}
    Answer:

ICR2's template asks for no particular answer form, and neither does Lost in the Middle's ("Write a
high-quality answer for the given question using only the provided search results (some of which might be
irrelevant)."): both score by an answer contained in the reply. RetrievalQA's QA template (Figure 8) is the one
among the papers this library follows that asks for a short answer; ``ANSWER_INSTRUCTIONS`` quotes it, by name,
and an answer instruction is put before the ICR2 text (which stays verbatim) only when one is named. The default
is none: the prompt is ICR2's Table 8 as written.

:func:`render_cic_prompt` also returns the exact character span of every passage block inside the rendered
text, so that attention or token positions can be attributed to passages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from haystack import Document
from haystack.dataclasses import ChatMessage

from icr2_components.parameters import boolean, document_list, non_empty_text

PASSAGE_SEPARATOR = "\n\n"
PASSAGE_ID_PREFIX = "PSG"


@dataclass(frozen=True)
class CiCTemplate:
    """One ICR2 task template: the instruction, the label before the query, the label that invites the answer."""

    task_type: str
    instruction: str
    query_label: str
    answer_label: str | None


TASK_TEMPLATES: dict[str, CiCTemplate] = {
    "qa": CiCTemplate(
        task_type="qa",
        instruction="Please answer the following question given the following passages:",
        query_label="Question",
        answer_label="Answer",
    ),
    "fact_verification": CiCTemplate(
        task_type="fact_verification",
        instruction=(
            "According to the following passages, please verify the given claim and predict your judgment on "
            "its factuality as TRUE or FALSE:"
        ),
        query_label="Claim",
        answer_label="Judgement",
    ),
    "dialogue": CiCTemplate(
        task_type="dialogue",
        instruction=(
            "According to the given passages, please provide a single response to complete the following "
            "conversation by role-playing as either Person A or Person B. Your response should be as "
            "knowledgeable and coherent with the conversation history as possible:"
        ),
        query_label="Conversation",
        answer_label=None,
    ),
}
TASK_TYPES = tuple(TASK_TEMPLATES)


@dataclass(frozen=True)
class AnswerInstruction:
    """A short-answer instruction quoted from a paper: its name, its exact words, and where they come from."""

    name: str
    text: str
    source: str


_RETRIEVALQA_FIGURE_8 = (
    "RetrievalQA (Zhang et al. 2024), Figure 8, instruction prompt template for QA with retrieved documents: "
    "https://arxiv.org/abs/2402.16457"
)
ANSWER_INSTRUCTIONS: dict[str, AnswerInstruction] = {
    # Figure 8 reads: 'Please answer the question based on the provided context. Only include the answer in your
    # response and try to be concise. If you do not know the answer, just say "I don't know".' The first sentence
    # is the task, which ICR2's own instruction states; these are the sentences that shape the answer.
    "retrievalqa": AnswerInstruction(
        name="retrievalqa",
        text='Only include the answer in your response and try to be concise. If you do not know the answer, '
             'just say "I don\'t know".',
        source=_RETRIEVALQA_FIGURE_8,
    ),
    "retrievalqa_concise": AnswerInstruction(
        name="retrievalqa_concise",
        text="Only include the answer in your response and try to be concise.",
        source=_RETRIEVALQA_FIGURE_8 + " (its first sentence about the answer, without the \"I don't know\" one)",
    ),
}
"""Named short-answer instructions, each quoting a paper's QA prompt word for word (``none``: no instruction)."""
ANSWER_INSTRUCTION_NAMES = ("none", *ANSWER_INSTRUCTIONS)


def get_answer_instruction(name: str | None) -> AnswerInstruction | None:
    """The named instruction; ``None`` or ``"none"`` is no instruction (ICR2's template as written)."""
    if name is None or name == "none":
        return None
    if name not in ANSWER_INSTRUCTIONS:
        raise ValueError(f"Unknown answer_instruction {name!r}; choose one of {list(ANSWER_INSTRUCTION_NAMES)}.")
    return ANSWER_INSTRUCTIONS[name]


def format_passage_id(position: int) -> str:
    """``1 -> "PSG001"`` (ICR2's ids; more than 999 passages simply get more digits)."""
    if position < 1:
        raise ValueError(f"Passage positions start at 1, got {position}.")
    return f"{PASSAGE_ID_PREFIX}{position:03d}"


def format_passage(passage_id: str, title: str, text: str) -> str:
    """One passage block of the corpus, without the separator."""
    return f"ID: {passage_id}\nTitle: {title}\nContext: {text}"


def document_title(document: Document) -> str:
    return str((document.meta or {}).get("title", "") or "")


def get_template(task_type: str) -> CiCTemplate:
    if task_type not in TASK_TEMPLATES:
        raise ValueError(f"Unknown task_type {task_type!r}; choose one of {list(TASK_TYPES)}.")
    return TASK_TEMPLATES[task_type]


def passage_ids_for(documents: Sequence[Document]) -> list[str]:
    """The id shown for each document: its ``meta["passage_id"]`` (set by the corpus builder), else its position.

    Raises on repeated ids: two passages answering to one id would make the spans and the reader's citations
    ambiguous.
    """
    ids = []
    for position, document in enumerate(documents, start=1):
        shown = (document.meta or {}).get("passage_id") or format_passage_id(position)
        ids.append(str(shown))
    if len(set(ids)) != len(ids):
        repeated = sorted({pid for pid in ids if ids.count(pid) > 1})
        raise ValueError(
            f"Passage ids repeat in the corpus ({repeated[:5]}); give each document a distinct meta['passage_id'] "
            "or remove it so ids are assigned by position."
        )
    return ids


@dataclass
class RenderedPrompt:
    """A rendered CiC prompt.

    ``text`` is the chat-templated string (generation prompt added) when a tokenizer was given, else the user
    message content alone. ``passage_char_spans[pid] = (start, end)`` satisfies
    ``text[start:end] == format_passage(pid, title, content)``; ``query_char_spans`` lists where the query
    appears (twice with query-aware contextualization).
    """

    messages: list[ChatMessage]
    text: str
    passage_char_spans: dict[str, tuple[int, int]]
    query_char_spans: list[tuple[int, int]] = field(default_factory=list)
    passage_ids: list[str] = field(default_factory=list)
    task_type: str = "qa"


def _user_content(
    template: CiCTemplate, query: str, blocks: list[str], query_aware: bool, answer_instruction: str | None = None
) -> tuple[str, list[tuple[int, int]], list[tuple[int, int]]]:
    """Build the user message; return it with block spans and query spans (offsets within the content)."""
    parts: list[str] = []
    length = 0
    query_spans: list[tuple[int, int]] = []
    block_spans: list[tuple[int, int]] = []

    def add(piece: str) -> tuple[int, int]:
        nonlocal length
        start = length
        parts.append(piece)
        length += len(piece)
        return start, length

    if answer_instruction:
        add(answer_instruction + "\n\n")
    add(template.instruction + "\n")
    if query_aware:
        add(f"{template.query_label}: ")
        query_spans.append(add(query))
        add("\n\n")
    for index, block in enumerate(blocks):
        if index:
            add(PASSAGE_SEPARATOR)
        block_spans.append(add(block))
    add(f"\n\n{template.query_label}: ")
    query_spans.append(add(query))
    if template.answer_label:
        add(f"\n{template.answer_label}:")
    return "".join(parts), block_spans, query_spans


def render_cic_prompt(
    task_type: str,
    query: str,
    documents: Sequence[Document],
    tokenizer: Any = None,
    query_aware: bool = False,
    system_prompt: str | None = None,
    add_generation_prompt: bool = True,
    answer_instruction: str | None = None,
) -> RenderedPrompt:
    """Render the ICR2 prompt for ``task_type`` over ``documents`` (in the order given).

    Usage:
        >>> rendered = render_cic_prompt("qa", "who wrote hamlet?", documents, tokenizer=tokenizer)
        >>> start, end = rendered.passage_char_spans["PSG001"]
        >>> rendered.text[start:end].startswith("ID: PSG001")
        True

    :param tokenizer: a Hugging Face tokenizer with a chat template; when given, ``text`` is the templated
        string and the spans index into it.
    :param query_aware: put the query before the corpus as well as after it.
    :param system_prompt: an optional system message (otherwise the chat template's default, if any).
    :param answer_instruction: the name of a short-answer instruction in ``ANSWER_INSTRUCTIONS`` (e.g.
        ``"retrievalqa"``), put before the task's instruction; ``None``/``"none"`` (default) keeps ICR2's template.
    """
    template = get_template(task_type)
    instruction = get_answer_instruction(answer_instruction)
    if instruction is not None and task_type != "qa":
        raise ValueError(f"answer_instruction {answer_instruction!r} is a QA instruction; task_type is {task_type!r}.")
    non_empty_text(query, "query")
    document_list(documents)
    boolean(query_aware, "query_aware")
    ids = passage_ids_for(documents)
    blocks = []
    for pid, document in zip(ids, documents, strict=True):
        if document.content is None:
            raise ValueError(f"Document {document.id} has no text; drop it before rendering (the corpus builder does).")
        blocks.append(format_passage(pid, document_title(document), document.content))
    content, block_spans, query_spans = _user_content(template, query, blocks, query_aware,
                                                      instruction.text if instruction else None)
    messages = []
    if system_prompt:
        messages.append(ChatMessage.from_system(system_prompt))
    messages.append(ChatMessage.from_user(content))

    if tokenizer is None:
        text, offset = content, 0
    else:
        chat = [{"role": m.role.value, "content": m.text} for m in messages]
        text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=add_generation_prompt)
        offset = _locate_content(text, content)

    passage_spans = {pid: (offset + s, offset + e) for pid, (s, e) in zip(ids, block_spans, strict=True)}
    query_char_spans = [(offset + s, offset + e) for s, e in query_spans]
    return RenderedPrompt(
        messages=messages,
        text=text,
        passage_char_spans=passage_spans,
        query_char_spans=query_char_spans,
        passage_ids=ids,
        task_type=task_type,
    )


def _locate_content(text: str, content: str) -> int:
    # The user content is the last message; searching from the right skips a system prompt that might
    # happen to contain the same words.
    offset = text.rfind(content)
    if offset < 0:
        raise ValueError(
            "The tokenizer's chat template changes the message text (it does not appear verbatim in the "
            "rendered prompt), so passage spans cannot be located exactly; use a template that keeps content "
            "unchanged or render without a tokenizer."
        )
    return offset
