"""CorpusInContextPromptBuilder: the ICR2 task prompt over a corpus, as chat messages for a reader."""

from __future__ import annotations

from typing import Any

from haystack import Document, component
from haystack.dataclasses import ChatMessage

from icr2_components.builders.passage_count import passages_meta
from icr2_components.parameters import boolean, one_of, override
from icr2_components.text.templates import TASK_TYPES, get_answer_instruction, get_template, render_cic_prompt


@component
class CorpusInContextPromptBuilder:
    """
    Renders the ICR2 corpus-in-context prompt (Table 8) for question answering (`qa`), fact verification
    (`fact_verification`) or dialogue completion (`dialogue`) as chat messages for `LocalChatReader.messages`.

    Passages appear in the order given, each as `ID: <meta passage_id or PSG<position>>`, `Title:`,
    `Context:`; the query follows the corpus (and also precedes it with `query_aware=True`, Lost in the
    Middle section 4.2). The reader's chat template adds the turn markers.

    ICR2's template asks for no particular answer form; `answer_instruction` names a short-answer instruction
    quoted from a paper (`icr2_components.text.templates.ANSWER_INSTRUCTIONS`: `retrievalqa` is RetrievalQA's
    Figure 8, "Only include the answer in your response and try to be concise. If you do not know the answer,
    just say "I don't know".", https://arxiv.org/abs/2402.16457), put before ICR2's text for `qa`. The default
    (`None`) is ICR2's Table 8 unchanged.

    Paper: ICR2, Qiu et al. 2025, "Eliciting In-context Retrieval and Reasoning for Long-context Large Language Models":
    https://arxiv.org/abs/2501.08248

    Usage example:
    ```python
    from icr2_components.builders import CorpusInContextPromptBuilder

    prompt_builder = CorpusInContextPromptBuilder(task_type="qa", query_aware=True)
    messages = prompt_builder.run(query="who wrote hamlet", documents=corpus)["prompt"]
    reply = reader.run(messages=messages)["replies"][0].text

    short = CorpusInContextPromptBuilder(task_type="qa", answer_instruction="retrievalqa")  # RetrievalQA Fig. 8
    ```
    """

    def __init__(self, task_type: str = "qa", query_aware: bool = False, system_prompt: str | None = None,
                 answer_instruction: str | None = None) -> None:
        """
        :param task_type: one of `qa`, `fact_verification`, `dialogue`.
        :param query_aware: repeat the query before the corpus.
        :param system_prompt: an optional system message (otherwise the chat template's default).
        :param answer_instruction: `None` (ICR2's template as written) or a name from `ANSWER_INSTRUCTIONS`
            (`retrievalqa`, `retrievalqa_concise`); `qa` only.
        """
        get_template(task_type)  # raises with the list of task types
        boolean(query_aware, "query_aware")
        if get_answer_instruction(answer_instruction) is not None and task_type != "qa":
            raise ValueError(
                f"answer_instruction {answer_instruction!r} is a QA instruction; task_type is {task_type!r}."
            )
        self.task_type = task_type
        self.query_aware = query_aware
        self.system_prompt = system_prompt
        self.answer_instruction = answer_instruction

    @component.output_types(prompt=list[ChatMessage], passage_ids=list[str], meta=dict)
    def run(
        self,
        query: str,
        documents: list[Document],
        task_type: str | None = None,
        query_aware: bool | None = None,
    ) -> dict[str, Any]:
        """
        :param query: the question, claim or conversation history.
        :param documents: the corpus, in prompt order; documents without text are an error.
        :param task_type: overrides the init value (one of `qa`, `fact_verification`, `dialogue`).
        :param query_aware: overrides the init value.
        :returns: `prompt` (chat messages), `passage_ids` (the ids shown, in order) and `meta`: `passages` (how
            many the prompt shows) and `no_passages` (True, with a logged warning, when there are none: the reader
            then answers from its own knowledge).
        :raises ValueError: an unknown `task_type`, or a document without text.
        """
        chosen = one_of(override(task_type, self.task_type), "task_type", TASK_TYPES)
        rendered = render_cic_prompt(
            chosen,
            query,
            documents,
            query_aware=self.query_aware if query_aware is None else query_aware,
            system_prompt=self.system_prompt,
            answer_instruction=self.answer_instruction,
        )
        meta = passages_meta(documents, "CorpusInContextPromptBuilder")
        return {"prompt": rendered.messages, "passage_ids": rendered.passage_ids, "meta": meta}
