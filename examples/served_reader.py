"""A reader behind an LLM server: the same pipeline, the model served over HTTP (no torch in this process).

`ServedChatReader` sends the prompt to any OpenAI-compatible server (llama.cpp, vLLM, Ollama, TGI, OpenAI) through
Haystack's `OpenAIChatGenerator`, checks it fits the served model's context first, and bounds each call in time.
Everything here runs on the core install:

    InMemoryBM25Retriever -> CorpusInContextPromptBuilder -> ServedChatReader (llama.cpp, SmolLM2-135M-Instruct)

It answers one question with `Pipeline.run`, then three at once with `Pipeline.run_async` (the reader awaits the
server, so a server with several slots answers them together).

Needs: pip install icr2-components, and an OpenAI-compatible server; the project's own:
bash scripts/llama_server.sh start   (127.0.0.1:8089, serving smollm2-135m-instruct).
Run: python served_reader.py   (ICR2_LLAMA_URL=http://host:port/v1 for another server)
"""

import asyncio
import os

from haystack import Pipeline
from haystack.components.retrievers import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from nq_open import nq_documents, read_nq_open

from icr2_components.builders import CorpusInContextPromptBuilder
from icr2_components.readers import ServedChatReader

SERVER = os.environ.get("ICR2_LLAMA_URL", "http://127.0.0.1:8089/v1")


def build_pipeline(document_store: InMemoryDocumentStore) -> Pipeline:
    """The RAG pipeline over `document_store`, its reader on the server."""
    pipeline = Pipeline()
    pipeline.add_component("retriever", InMemoryBM25Retriever(document_store=document_store, top_k=3))
    pipeline.add_component(
        "prompt_builder", CorpusInContextPromptBuilder(query_aware=True, answer_instruction="retrievalqa")
    )
    # timeout_s and max_retries bound every request: a server that is down is one clear error, never a hang.
    pipeline.add_component(
        "reader",
        ServedChatReader(api_base_url=SERVER, model="smollm2-135m-instruct", max_new_tokens=24, timeout_s=120),
    )
    pipeline.connect("retriever.documents", "prompt_builder.documents")
    pipeline.connect("prompt_builder.prompt", "reader.messages")
    return pipeline


def inputs(question: str) -> dict:
    return {"retriever": {"query": question}, "prompt_builder": {"query": question}}


def ask(pipeline: Pipeline, question: str) -> str:
    """Runs the pipeline on one question and returns the answer."""
    return pipeline.run(inputs(question))["reader"]["replies"][0].text


async def ask_many(pipeline: Pipeline, questions: list[str]) -> list[str]:
    """Runs the pipeline on several questions at once; answers in the questions' order."""
    results = await asyncio.gather(*(pipeline.run_async(inputs(q)) for q in questions))
    return [result["reader"]["replies"][0].text for result in results]


def main() -> None:
    document_store = InMemoryDocumentStore()
    document_store.write_documents(nq_documents(limit=300))
    pipeline = build_pipeline(document_store)
    records = read_nq_open(4)
    print(f"question: {records[0]['question']}")
    print(f"answer: {ask(pipeline, records[0]['question'])}")
    print(f"gold: {' | '.join(records[0]['answers'])}")
    # Three more at once.
    questions = [record["question"] for record in records[1:]]
    for question, answer in zip(questions, asyncio.run(ask_many(pipeline, questions)), strict=True):
        print(f"{question} -> {answer}")


if __name__ == "__main__":
    main()
