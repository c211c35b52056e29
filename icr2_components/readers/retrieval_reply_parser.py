"""RetrievalReplyParser: a retrieve-then-generate reader's reply -> the answer it gives, and what it retrieved."""

from __future__ import annotations

from typing import Any

from haystack import Document, component
from haystack.dataclasses import ChatMessage

from icr2_components.parameters import document_list
from icr2_components.text.retrieval_replies import RETRIEVAL_END, RETRIEVAL_START, parse_generation
from icr2_components.text.templates import passage_ids_for


@component
class RetrievalReplyParser:
    """
    Splits the reply of a reader fine-tuned with SFT-RTA or SFT-CCI (``<RETRIEVAL> ... </RETRIEVAL> The correct
    answer is X.``) into the answer and the passages it retrieved, so that scoring reads the answer and not the
    copied passage (a copy holds the gold answer, and answer match on the whole reply would credit it). A
    direct-answer reply (SFT-DA, "The answer is X.") passes through with its lead removed.

    A reply that opens the retrieval step and never closes it (cut at the answer budget) has no answer: its
    ``replies`` text is empty and it is counted in ``unfinished``, never scored on the copy.

    Paper: ICR2, Qiu et al. 2025, "Eliciting In-context Retrieval and Reasoning for Long-context Large Language
    Models" (section 4.1, figure 8): https://arxiv.org/abs/2501.08248

    Usage example:
    ```python
    from icr2_components.readers import RetrievalReplyParser

    parser = RetrievalReplyParser()
    out = parser.run(replies=reader_out["replies"], documents=corpus)
    out["replies"][0].text, out["retrieved_documents"]
    ```
    In YAML: `reader.replies -> parser.replies` and `corpus.documents -> parser.documents`; the pipeline's
    `replies` output is `parser.replies`.
    """

    def __init__(self, match_threshold: float = 0.5):
        """
        :param match_threshold: the token-overlap F1 a copied passage needs to be matched to a context passage
            (SFT-RTA copies); in (0, 1].
        :raises ValueError: when the threshold is outside (0, 1].
        """
        if isinstance(match_threshold, bool) or not isinstance(match_threshold, (int, float)) \
                or not 0.0 < float(match_threshold) <= 1.0:
            raise ValueError(f"match_threshold must be a number in (0, 1], got {match_threshold!r}.")
        self.match_threshold = match_threshold

    @component.output_types(replies=list[ChatMessage], retrieved_documents=list[Document], unfinished=int)
    def run(self, replies: list[ChatMessage], documents: list[Document] | None = None) -> dict[str, Any]:
        """
        :param replies: the reader's replies (the first is parsed; others pass through parsed the same way).
        :param documents: the passages of the prompt, in prompt order (the ids the prompt shows, as
            ``passage_ids_for`` gives them, are what a CCI reply cites).
        :returns: ``replies`` (the answers, meta ``raw_reply`` and ``retrieved_ids``), ``retrieved_documents``
            (the context passages the first reply retrieved, in its order) and ``unfinished`` (replies cut before
            ``</RETRIEVAL>``).
        :raises TypeError: when a reply is not a ChatMessage.
        """
        if not isinstance(replies, (list, tuple)):
            raise TypeError(f"replies must be a list of ChatMessages (the reader's replies), got {replies!r:.60}.")
        documents = list(document_list(documents, optional=True) or [])
        by_id = dict(zip(passage_ids_for(documents), documents, strict=True))
        context = {pid: d.content or "" for pid, d in by_id.items()}
        out, retrieved, unfinished = [], [], 0
        for position, reply in enumerate(replies):
            if not isinstance(reply, ChatMessage):
                raise TypeError(f"RetrievalReplyParser takes ChatMessage replies, got {type(reply).__name__}.")
            text = reply.text or ""
            parsed = parse_generation(text, context, self.match_threshold)
            answer = parsed.answer
            if RETRIEVAL_START in text and RETRIEVAL_END not in text[text.find(RETRIEVAL_START):]:
                answer, unfinished = "", unfinished + 1
            meta = dict(reply.meta or {}, raw_reply=text, retrieved_ids=parsed.retrieved_ids)
            out.append(ChatMessage.from_assistant(answer, meta=meta))
            if position == 0:
                retrieved = [by_id[pid] for pid in parsed.retrieved_ids if pid in by_id]
        return {"replies": out, "retrieved_documents": retrieved, "unfinished": unfinished}
