"""ContextUsePromptBuilder: the prompting CMT, the ICR2 QA prompt led by a context-use instruction chosen by name."""

from __future__ import annotations

from typing import Any

from haystack import Document, component
from haystack.dataclasses import ChatMessage

from icr2_components.builders.passage_count import passages_meta
from icr2_components.parameters import boolean, override
from icr2_components.text.templates import render_cic_prompt

CONTEXT_USE_INSTRUCTIONS: dict[str, str] = {
    "none": "",
    "faithful": "Answer based on the passages, even if they disagree with what you know.",
    "context_only": "Use only the information in the passages; do not use outside knowledge.",
    "trust_context": "The passages are accurate and up to date. Trust them over your own memory.",
    "relevance_check": "If the passages are relevant to the question, answer from them; if they are not, "
                       "answer from your own knowledge.",
    "ignore_irrelevant": "Some passages may be irrelevant. Ignore any passage that does not answer the question.",
    "memory_first": "Answer from your own knowledge, using the passages only if they clearly answer the question.",
    "concise_faithful": "Reply with the answer span from the passages only, as few words as possible.",
}
"""Named context-use instructions (CUB's prompting CMT searches 12 per dataset; ours are these 8)."""


@component
class ContextUsePromptBuilder:
    """
    The ICR2 QA corpus-in-context prompt preceded by a named context-use instruction (CUB's prompting CMT).

    `instruction` names one of `CONTEXT_USE_INSTRUCTIONS` (`none` is the plain ICR2 prompt); the search over
    them on a dev split is `icr2 compare --tune` (the pipeline's `metadata.tunable` lists the names).

    Paper: CUB, "Benchmarking Context Utilisation Techniques for Language Models" (2025): https://arxiv.org/abs/2505.16518

    Usage example:
    ```python
    from icr2_components.builders.context_use_prompt_builder import ContextUsePromptBuilder

    builder = ContextUsePromptBuilder(instruction="faithful")
    messages = builder.run(query="who wrote hamlet", documents=documents)["prompt"]
    ```
    """

    def __init__(self, instruction: str = "faithful", query_aware: bool = False) -> None:
        """
        :param instruction: A name from `CONTEXT_USE_INSTRUCTIONS`.
        :param query_aware: Repeat the query before the passages.
        """
        self._check(instruction)
        boolean(query_aware, "query_aware")
        self.instruction = instruction
        self.query_aware = query_aware

    @staticmethod
    def _check(name: str) -> None:
        if name not in CONTEXT_USE_INSTRUCTIONS:
            raise ValueError(
                f"Unknown context-use instruction {name!r}; choose one of {list(CONTEXT_USE_INSTRUCTIONS)}."
            )

    @component.output_types(prompt=list[ChatMessage], meta=dict)
    def run(self, query: str, documents: list[Document], instruction: str | None = None) -> dict[str, Any]:
        """
        :param query: The question.
        :param documents: The passages, in prompt order.
        :param instruction: Overrides the init value for this call.
        :returns: `prompt`: chat messages for a reader; `meta`: `passages` shown and `no_passages` (True, with a
            logged warning, when there are none).
        """
        name = override(instruction, self.instruction)
        self._check(name)
        rendered = render_cic_prompt("qa", query, documents, query_aware=self.query_aware)
        meta = passages_meta(documents, "ContextUsePromptBuilder")
        text = CONTEXT_USE_INSTRUCTIONS[name]
        if not text:
            return {"prompt": rendered.messages, "meta": meta}
        content = f"{text}\n\n{rendered.messages[-1].text}"
        return {"prompt": [*rendered.messages[:-1], ChatMessage.from_user(content)], "meta": meta}
