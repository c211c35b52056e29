"""A value a component refuses at construction is refused the same way when `run` is given it for one call.

Before, `reorderer.run(budget_passages=0)` returned no passages, and `rap.run(top_m=0)` and
`reader.run(max_new_tokens=0)` used the init values (`x or self.x` reads 0 as "not given"). The components run
on the bundled NQ sample's corpus-in-context instances and the real SmolLM2 where an override is used.
"""

from __future__ import annotations

import logging

import pytest
from haystack import Document
from haystack.dataclasses import ChatMessage

from icr2_components.builders import ConfounderAwareCorpusBuilder, CorpusInContextPromptBuilder
from icr2_components.builders.context_use_prompt_builder import ContextUsePromptBuilder
from icr2_components.builders.multi_agent_answer_prompt_builder import MultiAgentAnswerPromptBuilder
from icr2_components.errors import UserInputError
from icr2_components.filters import RetrievalAttentionFilter
from icr2_components.parameters import override, positive_int
from icr2_components.rankers.bi_encoder_ranker import BiEncoderRanker
from icr2_components.rankers.retrieval_head_ranker import RetrievalHeadRanker
from icr2_components.readers import LocalChatReader
from icr2_components.readers.context_aware_decoding_reader import ContextAwareDecodingReader
from icr2_components.readers.head_suppression_reader import HeadSuppressionReader
from icr2_components.readers.served_chat_reader import ServedChatReader
from icr2_components.reorderers import (
    GoldAtPositionReorderer,
    LostInTheMiddleReorderer,
    PrimacyReorderer,
    RecencyReorderer,
    ReverseReorderer,
)
from icr2_components.resources import shipped_file
from icr2_components.retrievers.index_retriever import IndexRetriever
from icr2_components.training.sample_data import nq_sample_instances

CPU = {"dtype": "float32", "device": "cpu"}
REORDERERS = [LostInTheMiddleReorderer, PrimacyReorderer, RecencyReorderer, ReverseReorderer]


@pytest.fixture(scope="module")
def instance(sample_files):
    """One NQ question of the bundled sample with its gold passage and three BM25 confounders."""
    return nq_sample_instances(1, passages=4)[0]


@pytest.mark.unit
def test_the_shared_checks_name_the_parameter_and_keep_zero_as_a_given_value():
    with pytest.raises(UserInputError, match=r"^budget_passages must be a positive integer or None \(no limit\), "
                                             r"got 0\.$"):
        positive_int(0, "budget_passages", optional=True, hint=" (no limit)")
    assert override(0, 5) == 0 and override(None, 5) == 5
    assert isinstance(UserInputError("x"), ValueError)  # callers catching ValueError keep working


@pytest.mark.parametrize("reorderer_class", REORDERERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize(("override_name", "value"), [("budget_passages", 0), ("budget_passages", -2),
                                                      ("budget_tokens", 0), ("budget_passages", 1.5)])
@pytest.mark.unit
def test_a_reorderer_refuses_a_run_time_budget_it_refuses_at_init(reorderer_class, override_name, value, instance):
    with pytest.raises(ValueError, match=f"{override_name} must be a positive integer or None"):
        reorderer_class(**{override_name: value})
    reorderer = reorderer_class(budget_passages=3)
    with pytest.raises(ValueError, match=f"{override_name} must be a positive integer or None"):
        reorderer.run(documents=instance.documents, **{override_name: value})
    # a valid override is used: one passage kept of the four
    kept = reorderer.run(documents=instance.documents, budget_passages=1)
    assert [d.id for d in kept["documents"]] == [instance.documents[0].id] and kept["report"]["kept"] == 1


@pytest.mark.unit
def test_gold_at_position_refuses_position_zero_and_a_zero_budget_at_run_time(instance):
    reorderer = GoldAtPositionReorderer(position=1)
    with pytest.raises(ValueError, match="position is 1-based"):
        reorderer.run(documents=instance.documents, gold_ids=instance.gold_passage_ids, position=0)
    with pytest.raises(ValueError, match="budget_passages must be a positive integer"):
        reorderer.run(documents=instance.documents, gold_ids=instance.gold_passage_ids, budget_passages=0)
    last = reorderer.run(documents=instance.documents, gold_ids=instance.gold_passage_ids, position=-1)["documents"]
    assert last[-1].meta["passage_id"] in instance.gold_passage_ids


def test_rap_refuses_top_m_zero_at_run_time_and_uses_a_valid_override(instance, smollm2):
    rap = RetrievalAttentionFilter(artifact=str(shipped_file("artifacts", "rap_heads_smollm2")), top_m=2, **CPU)
    for name, value in (("top_m", 0), ("num_heads", 0), ("top_m", -1)):
        with pytest.raises(ValueError, match=rf"{name} \(\w\) must be a positive integer or None"):
            rap.run(documents=instance.documents, query=instance.query, **{name: value})
    result = rap.run(documents=instance.documents, query=instance.query, top_m=1, num_heads=1)
    assert result["report"]["top_m"] == 1 and len(result["report"]["heads"]) == 1
    assert len(result["documents"]) == 1


def test_the_local_reader_refuses_max_new_tokens_zero_at_run_time(smollm2):
    reader = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=16, **CPU)
    messages = [ChatMessage.from_user("What is the capital of France?")]
    for value in (0, -1):
        with pytest.raises(ValueError, match=f"max_new_tokens must be a positive integer, got {value}."):
            reader.run(messages=messages, max_new_tokens=value)
        with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
            reader.run_batch([messages], max_new_tokens=value)
    reply = reader.run(messages=messages, max_new_tokens=2)["replies"][0]
    assert reply.meta["completion_tokens"] <= 2


def test_the_other_readers_refuse_their_bad_run_time_overrides(smollm2):
    messages = [ChatMessage.from_user("What is the capital of France?")]
    suppressing = HeadSuppressionReader(model="smollm2-135m-instruct", num_heads=0, **CPU)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
        suppressing.run(messages=messages, max_new_tokens=0)
    with pytest.raises(ValueError, match="num_heads must be a non-negative integer, got -1"):
        suppressing.run(messages=messages, num_heads=-1)
    with pytest.raises(ValueError, match="direction must be one of 'context', 'memory', got ''"):
        suppressing.run(messages=messages, direction="")
    decoding = ContextAwareDecodingReader(model="smollm2-135m-instruct", technique="none", **CPU)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
        decoding.run(messages=messages, max_new_tokens=0)
    # refused before any request is sent, so no server is needed to show it
    served = ServedChatReader(api_base_url="http://127.0.0.1:9/v1", model="smollm2-135m-instruct")
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer, got 0"):
        served.run(messages=messages, max_new_tokens=0)


@pytest.mark.unit
def test_rankers_and_the_retriever_refuse_top_k_zero_at_run_time(instance):
    with pytest.raises(ValueError, match="top_k must be a positive integer or None"):
        BiEncoderRanker(top_k=3).run(query=instance.query, documents=instance.documents, top_k=0)
    with pytest.raises(ValueError, match=r"top_k \(K\) must be a positive integer or None"):
        RetrievalHeadRanker(head="no-head-needed-to-refuse").run(
            documents=instance.documents, query=instance.query, top_k=0
        )
    retriever = IndexRetriever(index=str(shipped_file("indexing", "kilt-sample")), method="bm25", top_k=3)
    with pytest.raises(ValueError, match=r"top_k must be a .* got 0"):
        retriever.run(query=instance.query, top_k=0)


@pytest.mark.unit
def test_builders_refuse_bad_run_time_overrides(instance):
    builder = ConfounderAwareCorpusBuilder(retrievers=["bm25"], budget_passages=4)
    with pytest.raises(ValueError, match="budget_passages must be a positive integer or None"):
        builder.run(query=instance.query, bm25=instance.documents, budget_passages=0)
    with pytest.raises(ValueError, match="task_type must be one of"):
        CorpusInContextPromptBuilder().run(query=instance.query, documents=instance.documents, task_type="")
    with pytest.raises(ValueError, match="Unknown context-use instruction ''"):
        ContextUsePromptBuilder().run(query=instance.query, documents=instance.documents, instruction="")


# --- an empty passage list is flagged and logged, not answered in silence ------------------------------------


@pytest.mark.unit
def test_the_prompt_builder_flags_and_logs_a_prompt_over_no_passages(instance, caplog):
    builder = CorpusInContextPromptBuilder()
    with caplog.at_level(logging.WARNING, logger="icr2_components.builders.passage_count"):
        empty = builder.run(query=instance.query, documents=[])
    assert empty["meta"] == {"passages": 0, "no_passages": True} and empty["passage_ids"] == []
    assert any("CorpusInContextPromptBuilder got no passages" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="icr2_components.builders.passage_count"):
        full = builder.run(query=instance.query, documents=instance.documents)
    assert full["meta"] == {"passages": 4, "no_passages": False} and not caplog.records


@pytest.mark.unit
def test_the_sibling_builders_flag_no_passages_too(instance, caplog):
    with caplog.at_level(logging.WARNING, logger="icr2_components.builders.passage_count"):
        context_use = ContextUsePromptBuilder().run(query=instance.query, documents=[])
        judged_relevant = MultiAgentAnswerPromptBuilder().run(
            query=instance.query, documents=[], judge_replies=[ChatMessage.from_assistant("Yes.")]
        )
    assert context_use["meta"]["no_passages"] and judged_relevant["meta"]["no_passages"]
    assert len(caplog.records) == 2
    from_memory = MultiAgentAnswerPromptBuilder().run(
        query=instance.query, documents=[Document(content="x")], judge_replies=[ChatMessage.from_assistant("No.")]
    )
    assert from_memory["meta"] == {"passages": 0, "no_passages": False}  # the memory prompt shows none by design
