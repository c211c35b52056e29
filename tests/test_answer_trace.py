"""What compare records of how an answer came about (``pipeline_spec.answer_trace``): the prompt the reader was
given, as text and cut at its bound, and each technique's own trace (``trace_record`` of the gate, the RAP filter
and the corpus builder) read from component outputs: the gate's and the corpus builder's from their real runs (no
model needed), RAP's from a report written by hand in the shape its run returns (scoring needs the model; the
browser test runs it for real)."""

from __future__ import annotations

import pytest
from haystack import Document, Pipeline, component
from haystack.dataclasses import ChatMessage

from icr2_components.builders.corpus_builder import ConfounderAwareCorpusBuilder
from icr2_components.builders.prompt_builder import CorpusInContextPromptBuilder
from icr2_components.filters.retrieval_attention_filter import RetrievalAttentionFilter
from icr2_components.gates.time_aware_retrieval_gate import TimeAwareRetrievalGate
from icr2_components.pipeline_spec import MAX_PROMPT_CHARS, answer_trace, prompt_feeds, traced_components

pytestmark = pytest.mark.unit


@component
class EchoReader:
    """A stand-in reader for the pipeline's shape only: answer_trace reads what feeds its ``messages``."""

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage]) -> dict:
        return {"replies": messages}


def _passages() -> list[Document]:
    return [Document(id=f"p{i}", content=f"passage {i} text") for i in range(1, 5)]


def _rap_pipeline() -> tuple[Pipeline, ConfounderAwareCorpusBuilder]:
    builder = ConfounderAwareCorpusBuilder(retrievers=["bm25"], budget_passages=4, shuffle=False)
    pipeline = Pipeline()
    pipeline.add_component("corpus", builder)
    pipeline.add_component("rap_filter", RetrievalAttentionFilter(artifact="rap_heads_smollm2",
                                                                  model="smollm2-135m-instruct", top_m=1))
    pipeline.add_component("prompt", CorpusInContextPromptBuilder(task_type="qa"))
    pipeline.add_component("reader", EchoReader())
    pipeline.connect("corpus.documents", "rap_filter.documents")
    pipeline.connect("rap_filter.documents", "prompt.documents")
    pipeline.connect("prompt.prompt", "reader.messages")
    return pipeline, builder


def test_the_components_that_trace_and_the_prompt_feed_are_found_by_their_declarations():
    pipeline, _ = _rap_pipeline()
    assert traced_components(pipeline) == ["corpus", "rap_filter"]
    assert prompt_feeds(pipeline) == [("prompt", "prompt")]


def test_rap_and_corpus_builder_traces_name_the_passages_kept_dropped_and_the_confounders():
    pipeline, builder = _rap_pipeline()
    gold, *others = _passages()
    corpus = builder.run(query="q?", bm25=others, gold_documents=[gold])
    assert [d.id for d in corpus["documents"]] == ["p1", "p2", "p3", "p4"]
    # the report RetrievalAttentionFilter.run returns, written by hand: p3 kept, the others dropped
    scored = [{"id": d.id, "score": s, "kept": d.id == "p3"} for d, s in zip(corpus["documents"], (0.1, 0.2, 0.6, 0.1),
                                                                            strict=True)]
    kept = [corpus["documents"][2]]
    rap = {"documents": kept, "report": {"passages_in": 4, "passages_out": 1, "top_m": 1, "heads": ["L1H2"],
                                         "m_clamped": False, "scored": scored}}
    prompt = CorpusInContextPromptBuilder(task_type="qa").run(query="q?", documents=kept)
    result = {"corpus": corpus, "rap_filter": rap, "prompt": prompt}
    fields = answer_trace(pipeline, result, shown=kept, given=None)
    assert fields["prompt"].startswith("user:\n") and "passage 3 text" in fields["prompt"]
    assert "passage 2 text" not in fields["prompt"] and fields["prompt_chars"] == len(fields["prompt"])
    assert "prompt_truncated" not in fields
    assert fields["trace"]["rap_filter"] == {"technique": "rap_filter", "kept_ids": ["p3"],
                                             "dropped_ids": ["p1", "p2", "p4"],
                                             "scores": {"p1": 0.1, "p2": 0.2, "p3": 0.6, "p4": 0.1}, "top_m": 1,
                                             "heads": ["L1H2"], "m_clamped": False}
    built = fields["trace"]["corpus"]
    assert built["technique"] == "corpus_builder" and built["gold_ids"] == ["p1"]
    assert built["confounder_ids"] == ["p2", "p3", "p4"]
    assert (built["budget"], built["used"], built["budget_unit"]) == (4, 4, "passages")
    # the texts of passages the traces name that the prompt did not show (the shown one is the record's already)
    assert fields["trace_passages"] == {"p1": "passage 1 text", "p2": "passage 2 text", "p4": "passage 4 text"}


def test_a_prompt_over_the_bound_is_cut_and_says_so():
    pipeline, _ = _rap_pipeline()
    long_text = "x" * (MAX_PROMPT_CHARS + 500)
    result = {"prompt": {"prompt": [ChatMessage.from_system("be brief"), ChatMessage.from_user(long_text)]}}
    fields = answer_trace(pipeline, result, shown=None, given=None)
    assert len(fields["prompt"]) == MAX_PROMPT_CHARS and fields["prompt_truncated"] is True
    assert fields["prompt_chars"] == len("system:\nbe brief\n\nuser:\n") + len(long_text)
    assert "trace" not in fields  # no traced component ran


def test_the_gate_trace_is_its_decision_and_score_and_a_branch_not_taken_records_no_prompt():
    gate = TimeAwareRetrievalGate(method="always", model=None)
    pipeline = Pipeline()
    pipeline.add_component("gate", gate)
    pipeline.add_component("closed_book_prompt", CorpusInContextPromptBuilder(task_type="qa"))
    pipeline.add_component("context_prompt", CorpusInContextPromptBuilder(task_type="qa"))
    pipeline.add_component("closed_reader", EchoReader())
    pipeline.add_component("rag_reader", EchoReader())
    pipeline.connect("gate.no_retrieval", "closed_book_prompt.query")
    pipeline.connect("gate.retrieve", "context_prompt.query")
    pipeline.connect("closed_book_prompt.prompt", "closed_reader.messages")
    pipeline.connect("context_prompt.prompt", "rag_reader.messages")
    decided = gate.run(query="who wrote it?")
    given = _passages()[:1]
    result = {"gate": decided, "context_prompt": CorpusInContextPromptBuilder(task_type="qa").run(
        query="who wrote it?", documents=given)}
    fields = answer_trace(pipeline, result, shown=given, given=given)
    assert fields["trace"] == {"gate": {"technique": "gate", "decision": "retrieve", "score": 1.0, "threshold": None,
                                        "method": "always", "scoring": "fixed"}}
    assert "who wrote it?" in fields["prompt"] and "passage 1 text" in fields["prompt"]
    assert "trace_passages" not in fields
    # a record's fields are plain JSON
    import json

    assert json.loads(json.dumps(fields)) == fields


def test_outputs_without_a_report_or_decision_trace_nothing():
    assert RetrievalAttentionFilter.trace_record({"documents": []}) is None
    assert ConfounderAwareCorpusBuilder.trace_record({}) is None
    assert TimeAwareRetrievalGate.trace_record({"retrieve": "q"}) is None
