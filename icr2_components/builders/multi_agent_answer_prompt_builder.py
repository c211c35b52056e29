"""MultiAgentAnswerPromptBuilder: the second agent's prompt, faithful to the context or from memory by verdict."""

from __future__ import annotations

from typing import Any

from haystack import Document, component
from haystack.dataclasses import ChatMessage

from icr2_components.builders.passage_count import passages_meta
from icr2_components.parameters import document_list, non_empty_text
from icr2_components.text.templates import render_cic_prompt

FAITHFUL_INSTRUCTION = (
    "Answer the question using only the passages below, even if they contradict what you believe. "
    "Only include the answer in your response."
)
MEMORY_PROMPT = (
    "Please use your own knowledge to answer the questions. Only include the answer in your response and try "
    "to be concise.\n\nQuestion: {query}\n\nAnswer:"
)
UNCLEAR_POLICIES = ("relevant", "irrelevant")


def parse_verdict(text: str) -> str:
    """``relevant`` (a reply starting with yes), ``irrelevant`` (no) or ``unclear``."""
    words = text.strip().lower().lstrip("\"'*").split()
    first = words[0].strip(".,!:;\"'") if words else ""
    if first == "yes":
        return "relevant"
    if first == "no":
        return "irrelevant"
    return "unclear"


@component
class MultiAgentAnswerPromptBuilder:
    """
    The multi-agent CMT's second step (CUB): from the judge's reply, prompt the answering agent either to answer
    faithfully to the context (judged relevant) or from its own memory, without the context (judged irrelevant).

    A reply that is neither yes nor no is `unclear`; it is treated as `on_unclear` says and reported in the
    `verdict` output (never silently).

    Paper: CUB, "Benchmarking Context Utilisation Techniques for Language Models" (2025): https://arxiv.org/abs/2505.16518

    Usage example:
    ```python
    from icr2_components.builders.multi_agent_answer_prompt_builder import MultiAgentAnswerPromptBuilder

    builder = MultiAgentAnswerPromptBuilder()
    out = builder.run(query="who wrote hamlet", documents=documents, judge_replies=judge_replies)
    answer = reader.run(messages=out["prompt"])["replies"][0].text   # out["verdict"]: relevant / irrelevant / unclear
    ```
    """

    def __init__(self, faithful_instruction: str = FAITHFUL_INSTRUCTION, memory_prompt: str = MEMORY_PROMPT,
                 on_unclear: str = "relevant") -> None:
        """
        :param faithful_instruction: Put before the ICR2 QA prompt when the context is judged relevant.
        :param memory_prompt: The closed-book prompt used when it is judged irrelevant; must contain `{query}`.
        :param on_unclear: `relevant` or `irrelevant`: how a reply that is neither yes nor no counts.
        """
        if "{query}" not in memory_prompt:
            raise ValueError("memory_prompt must contain the placeholder {query}.")
        if on_unclear not in UNCLEAR_POLICIES:
            raise ValueError(f"on_unclear must be one of {list(UNCLEAR_POLICIES)}, got {on_unclear!r}.")
        self.faithful_instruction = faithful_instruction
        self.memory_prompt = memory_prompt
        self.on_unclear = on_unclear

    @component.output_types(prompt=list[ChatMessage], verdict=str, meta=dict)
    def run(self, query: str, documents: list[Document], judge_replies: list[ChatMessage]) -> dict[str, Any]:
        """
        :param query: The question.
        :param documents: The context the judge saw.
        :param judge_replies: The judge reader's replies (the first is read).
        :returns: `prompt` for the answering reader, `verdict` (`relevant`, `irrelevant` or `unclear`) and `meta`:
            `passages` in the prompt and `no_passages` (True, with a logged warning, when a context judged relevant
            has none; the memory prompt shows none by design and is not flagged).
        """
        non_empty_text(query, "query")
        document_list(documents)
        if not judge_replies:
            raise ValueError(f"judge_replies holds no reply (got {judge_replies!r}); connect the judge reader's "
                             "replies.")
        if not isinstance(judge_replies[0], ChatMessage):
            raise ValueError(f"judge_replies[0] must be a Haystack ChatMessage, got {type(judge_replies[0]).__name__} "
                             f"{judge_replies[0]!r:.60}.")
        verdict = parse_verdict(judge_replies[0].text or "")
        relevant = verdict == "relevant" or (verdict == "unclear" and self.on_unclear == "relevant")
        if relevant:
            rendered = render_cic_prompt("qa", query, documents)
            content = f"{self.faithful_instruction}\n\n{rendered.messages[-1].text}"
            prompt = [*rendered.messages[:-1], ChatMessage.from_user(content)]
            meta = passages_meta(documents, "MultiAgentAnswerPromptBuilder")
        else:
            prompt = [ChatMessage.from_user(self.memory_prompt.format(query=query))]
            meta = {"passages": 0, "no_passages": False}
        return {"prompt": prompt, "verdict": verdict, "meta": meta}
