"""Text that shows nothing (white space, zero-width spaces, a byte-order mark) is refused wherever a question or a
message is taken: a reader's messages, a retriever's query, the served run route's query and the OpenAI route's last
user message. Before, each checked ``str.strip()`` alone, so a zero-width space was answered as a question."""

from __future__ import annotations

from pathlib import Path

import pytest
from haystack import Document
from haystack.dataclasses import ChatMessage
from haystack.document_stores.in_memory import InMemoryDocumentStore

from icr2_components.errors import UserInputError
from icr2_components.parameters import message_list, non_empty_text
from icr2_components.retrievers import IndexRetriever

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
INVISIBLE = ["\u200b", "\u200b\u200c\u200d", "\ufeff \u2060", " \u00ad\n"]


@pytest.mark.parametrize("text", INVISIBLE)
def test_a_message_of_invisible_characters_is_no_message(text):
    with pytest.raises(UserInputError, match="hold no text"):
        message_list([ChatMessage.from_system(" "), ChatMessage.from_user(text)])
    with pytest.raises(UserInputError, match="query"):
        non_empty_text(text, "query")
    # one readable message among them is enough
    assert message_list([ChatMessage.from_user(text), ChatMessage.from_user("Who wrote Hamlet?")])


@pytest.mark.parametrize("text", INVISIBLE)
def test_a_retriever_query_of_invisible_characters_is_refused_not_answered_empty(text):
    store = InMemoryDocumentStore()
    store.write_documents([Document(content="Hamlet was written by William Shakespeare.")])
    retriever = IndexRetriever(document_store=store, method="bm25")
    with pytest.raises(ValueError, match="shows some text"):
        retriever.run(query=text)
    assert retriever.run(query="Who wrote Hamlet?")["documents"]


@pytest.mark.parametrize("text", INVISIBLE)
def test_the_served_routes_refuse_a_query_that_shows_nothing(text):
    from icr2_components.pipeline_spec import PipelineSpec
    from icr2_components.serving.openai_models import ChatRequestRefused, query_from_messages
    from icr2_components.serving.request_model import build_request_model

    model = build_request_model(PipelineSpec.from_file(str(ROOT / "pipelines" / "vanilla_rag.yaml")))
    with pytest.raises(ValueError, match="shows no text"):
        model.model_validate({"query": text})
    assert model.model_validate({"query": "Who wrote Hamlet?"}).query == "Who wrote Hamlet?"
    with pytest.raises(ChatRequestRefused, match="shows no text"):
        query_from_messages([{"role": "user", "content": text}])
    assert query_from_messages([{"role": "user", "content": "Who wrote Hamlet?"}]) == (0, "Who wrote Hamlet?")
