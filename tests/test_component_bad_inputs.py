"""Components called directly with a bad value refuse it in one line naming the parameter and what it got, instead
of failing inside (a ``'NoneType' object is not iterable``, an ``AttributeError`` on a string, numpy's or
pathlib's message) or going on with it (a string read as true, a NaN weight, a gold id that is nowhere)."""

from __future__ import annotations

import json

import pytest
from haystack import Document
from haystack.dataclasses import ChatMessage

from icr2_components import load_pipeline, technique_component
from icr2_components.builders import (
    ConfounderAwareCorpusBuilder,
    ContextUsePromptBuilder,
    CorpusInContextPromptBuilder,
    MultiAgentAnswerPromptBuilder,
    RelevanceJudgePromptBuilder,
)
from icr2_components.errors import UserInputError
from icr2_components.parameters import boolean, document_list, message_list
from icr2_components.readers import RetrievalReplyParser, ServedChatReader
from icr2_components.reorderers import GoldAtPositionReorderer, LostInTheMiddleReorderer, PrimacyReorderer
from icr2_components.resources.lookup import resolve_file

DOCS = [Document(id=f"d{i}", content=f"passage {i}") for i in range(4)]


@pytest.mark.unit
def test_the_shared_checks_name_the_parameter_the_item_and_what_it_got():
    with pytest.raises(UserInputError, match=r"^documents must be a list of Haystack Documents, got None\.$"):
        document_list(None)
    with pytest.raises(UserInputError, match=r"^documents\[1\] must be a Haystack Document, got str 'x'\.$"):
        document_list([DOCS[0], "x"])
    assert document_list(None, optional=True) is None and document_list(DOCS) is DOCS
    with pytest.raises(UserInputError, match=r"^messages must be a non-empty list of ChatMessages, got \[\]\.$"):
        message_list([])
    with pytest.raises(UserInputError, match=r"^messages\[0\] must be a Haystack ChatMessage, got str 'hi'\.$"):
        message_list(["hi"])
    with pytest.raises(UserInputError, match=r"^messages hold no text: every one of the 1 message\(s\) is empty or "
                       r"shows nothing \(white space or invisible characters only\)\.$"):
        message_list([ChatMessage.from_user("  ")])
    with pytest.raises(UserInputError, match=r"^do_sample must be True or False, got 'yes'\.$"):
        boolean("yes", "do_sample")


@pytest.mark.parametrize("reorderer", [PrimacyReorderer(), LostInTheMiddleReorderer()])
@pytest.mark.unit
def test_reorderers_refuse_documents_that_are_not_a_list_of_documents(reorderer):
    with pytest.raises(ValueError, match=r"documents must be a list of Haystack Documents, got None"):
        reorderer.run(documents=None)
    with pytest.raises(ValueError, match=r"documents\[0\] must be a Haystack Document, got str"):
        reorderer.run(documents=["a passage as a string"])


@pytest.mark.unit
def test_gold_ids_that_are_not_among_the_documents_are_named():
    with pytest.raises(ValueError, match=r"None of gold_ids \['nowhere'\] is among the 4 documents"):
        GoldAtPositionReorderer().run(documents=DOCS, gold_ids=["nowhere"], position=2)
    assert [d.id for d in GoldAtPositionReorderer().run(documents=DOCS, gold_ids=["d3"], position=2)["documents"]][
        1] == "d3"


@pytest.mark.unit
def test_prompt_builders_refuse_a_bad_query_documents_or_flag():
    with pytest.raises(ValueError, match=r"query_aware must be True or False, got 'yes'"):
        CorpusInContextPromptBuilder(query_aware="yes")
    with pytest.raises(ValueError, match=r"query_aware must be True or False, got 'no'"):
        ContextUsePromptBuilder(query_aware="no")
    with pytest.raises(ValueError, match=r"query must be a non-empty string, got 42"):
        CorpusInContextPromptBuilder().run(query=42, documents=DOCS)
    with pytest.raises(ValueError, match=r"documents must be a list of Haystack Documents, got None"):
        ContextUsePromptBuilder().run(query="Who?", documents=None)
    with pytest.raises(ValueError, match=r"query must be a non-empty string, got 42"):
        RelevanceJudgePromptBuilder().run(query=42, documents=DOCS)
    builder = MultiAgentAnswerPromptBuilder()
    with pytest.raises(ValueError, match=r"judge_replies\[0\] must be a Haystack ChatMessage, got str"):
        builder.run(query="Who?", documents=DOCS, judge_replies=["yes"])
    # the memory prompt would have asked "Question: None"
    with pytest.raises(ValueError, match=r"query must be a non-empty string, got None"):
        builder.run(query=None, documents=DOCS, judge_replies=[ChatMessage.from_assistant("no")])


@pytest.mark.unit
def test_the_corpus_builder_refuses_bad_lists_seeds_and_flags():
    with pytest.raises(ValueError, match=r"seed must be an integer, got 'x'"):
        ConfounderAwareCorpusBuilder(budget_passages=4, seed="x")
    with pytest.raises(ValueError, match=r"shuffle must be True or False, got 'no'"):
        ConfounderAwareCorpusBuilder(budget_passages=4, shuffle="no")
    with pytest.raises(ValueError, match=r"confounding_ratio must be a number in \[0, 1\], got '0.5'"):
        ConfounderAwareCorpusBuilder(budget_passages=4, confounding_ratio="0.5")
    builder = ConfounderAwareCorpusBuilder(retrievers=["bm25"], budget_passages=4)
    with pytest.raises(ValueError, match=r"gold_documents\[0\] must be a Haystack Document, got NoneType"):
        builder.run(query="Who?", gold_documents=[None])
    with pytest.raises(ValueError, match=r"bm25\[1\] must be a Haystack Document, got dict"):
        builder.run(query="Who?", bm25=[DOCS[0], {"content": "x"}])


def test_readers_refuse_messages_that_hold_no_chat_message_or_no_text():
    reader = ServedChatReader(api_base_url="http://127.0.0.1:9/v1", model="m", context_length=2048, tokenizer=None,
                              max_retries=0)
    with pytest.raises(ValueError, match=r"messages\[0\] must be a Haystack ChatMessage, got str"):
        reader.run(messages=["What?"])
    with pytest.raises(ValueError, match=r"messages hold no text"):
        reader.run(messages=[ChatMessage.from_user("")])
    with pytest.raises(TypeError, match=r"replies must be a list of ChatMessages"):
        RetrievalReplyParser().run(replies=None)


def test_local_models_check_dtype_device_and_flags_when_built():
    pytest.importorskip("torch")
    from icr2_components.filters import RetrievalAttentionFilter
    from icr2_components.readers import ContextAwareDecodingReader, HeadSuppressionReader, LocalChatReader

    with pytest.raises(ValueError, match=r"do_sample must be True or False, got 'yes'"):
        LocalChatReader(model="tiny-random-mistral", do_sample="yes")
    with pytest.raises(ValueError, match=r"device must be cpu, cuda, cuda:N or mps, .* got 'tpu'"):
        LocalChatReader(model="tiny-random-mistral", device="tpu")
    with pytest.raises(ValueError, match=r"dtype must be one of auto, float32, float16, bfloat16, got 'int4'"):
        ContextAwareDecodingReader(model="tiny-random-mistral", dtype="int4")
    with pytest.raises(ValueError, match=r"alpha must be a number >= 0 .* got nan"):
        ContextAwareDecodingReader(model="tiny-random-mistral", alpha=float("nan"))
    with pytest.raises(ValueError, match=r"scale must be a number in \[0, 1\] .* got 'half'"):
        HeadSuppressionReader(model="tiny-random-mistral", heads=[[0, 0]], scale="half")
    with pytest.raises(ValueError, match=r"device must be .* got 'tpu'"):
        RetrievalAttentionFilter(artifact="rap_heads_smollm2", device="tpu")


def test_head_artifacts_that_are_folders_or_not_json_are_named(tmp_path):
    pytest.importorskip("torch")
    from icr2_components.artifacts.retrieval_heads import RetrievalHeadArtifact

    with pytest.raises(ValueError, match=rf"{tmp_path} is a folder, not a retrieval-head artifact \(JSON\)"):
        RetrievalHeadArtifact.load(tmp_path)
    (tmp_path / "heads.json").write_text("not json")
    with pytest.raises(ValueError, match=r"heads.json is not a .* artifact \(JSON\)"):
        RetrievalHeadArtifact.load(tmp_path / "heads.json")
    (tmp_path / "list.json").write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match=r"list.json is not .* it holds a JSON list, not an object"):
        RetrievalHeadArtifact.load(tmp_path / "list.json")
    artifact = RetrievalHeadArtifact.load("rap_heads_smollm2")
    with pytest.raises(ValueError, match=rf"num_heads \(Q\) is 100000, more heads than the artifact ranks "
                                         rf"\({len(artifact.ranking)}\)"):
        artifact.top_heads(100_000)


@pytest.mark.unit
def test_loading_refuses_a_folder_or_a_value_that_is_no_path(tmp_path):
    with pytest.raises(ValueError, match=rf"{tmp_path} is a folder; give a pipeline YAML"):
        load_pipeline(tmp_path)
    with pytest.raises(ValueError, match=r"path must be a shipped pipeline's name or a pipeline YAML's path, got None"):
        load_pipeline(None)
    with pytest.raises(ValueError, match=r"backend must be a Backend, a backend file's path or a shipped backend's "
                                         r"name, got int 42"):
        technique_component("closed_book", backend=42)
    with pytest.raises(ValueError, match=r"A shipped backends name or a file path is needed, got int 7"):
        resolve_file("backends", 7)


@pytest.mark.unit
def test_load_pipeline_follows_a_backend_as_technique_component_does():
    from icr2_components.readers.served_chat_reader import ServedChatReader

    served = load_pipeline("closed_book", backend="llama_cpp_server")  # built, not warmed up: no server asked
    assert isinstance(served.get_component("reader"), ServedChatReader)
    assert not isinstance(load_pipeline("closed_book").get_component("reader"), ServedChatReader)
    with pytest.raises(ValueError, match=r"backend must be a Backend, a backend file's path or a shipped backend's "
                                         r"name, got int 42"):
        load_pipeline("closed_book", backend=42)
    with pytest.raises(ValueError, match=r"neither a file .* nor a shipped backends name; shipped: llama_cpp_server"):
        load_pipeline("closed_book", backend="no_such_backend")
