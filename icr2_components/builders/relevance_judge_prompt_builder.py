"""RelevanceJudgePromptBuilder: the first agent's prompt of the multi-agent CMT (is this context relevant?)."""

from __future__ import annotations

from typing import Any

from haystack import Document, component
from haystack.dataclasses import ChatMessage

from icr2_components.errors import UserInputError
from icr2_components.parameters import document_list, non_empty_text
from icr2_components.text.templates import document_title

DEFAULT_JUDGE_INSTRUCTION = (
    "Does the context below contain the answer to the question? Reply with only \"yes\" or \"no\"."
)


@component
class RelevanceJudgePromptBuilder:
    """
    Builds the relevance judge's prompt (CUB's multi-agent CMT, first agent) and passes the documents on.

    The documents enter the pipeline here (`metadata.context_input: judge_prompt.documents`) and flow on to
    `MultiAgentAnswerPromptBuilder`, so compare's controlled context types reach both agents.

    Paper: CUB, "Benchmarking Context Utilisation Techniques for Language Models" (2025): https://arxiv.org/abs/2505.16518

    Usage example:
    ```python
    from icr2_components.builders.relevance_judge_prompt_builder import RelevanceJudgePromptBuilder

    judge = RelevanceJudgePromptBuilder()
    out = judge.run(query="who wrote hamlet", documents=documents)
    verdict = reader.run(messages=out["prompt"])["replies"]
    ```
    """

    def __init__(self, instruction: str = DEFAULT_JUDGE_INSTRUCTION) -> None:
        """:param instruction: The judge's question; it must ask for a yes/no reply."""
        if not isinstance(instruction, str) or not instruction.strip():
            raise ValueError("instruction must be a non-empty string asking for a yes/no reply.")
        self.instruction = instruction

    @component.output_types(prompt=list[ChatMessage], documents=list[Document])
    def run(self, query: str, documents: list[Document]) -> dict[str, Any]:
        """
        :param query: The question.
        :param documents: The context (one or more passages); empty is an error (there is nothing to judge).
        :returns: `prompt` for the judge reader and the unchanged `documents`.
        :raises UserInputError: `query` is empty, `documents` is not a non-empty list of Documents, or a document
            has no text (judging an empty passage would ask the reader about nothing).
        """
        non_empty_text(query, "query")
        document_list(documents)
        if not documents:
            raise UserInputError("The multi-agent CMT judges a context, but no documents were given; pass the "
                                 "passages.")
        empty = [d.id for d in documents if not (d.content or "").strip()]
        if empty:
            raise UserInputError(f"documents {empty} have no text; drop them before the judge (there is nothing to "
                                 "judge in an empty passage).")
        context = "\n\n".join(f"Title: {document_title(d)}\n{d.content or ''}" for d in documents)
        text = f"{self.instruction}\n\nContext:\n{context}\n\nQuestion: {query}\nRelevant (yes/no):"
        return {"prompt": [ChatMessage.from_user(text)], "documents": documents}
