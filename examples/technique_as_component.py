"""A shipped technique pipeline as one component inside your own pipeline (Haystack's `SuperComponent`).

Every technique of the library is a pipeline YAML that declares its inputs and outputs. `technique_component(name)`
loads one (from the installed package, by name) as a Haystack `SuperComponent`, so it drops into a pipeline you
build next to Haystack's own components. Here your own BM25 retriever feeds the `oracle` technique (ICR2's prompt
and SmolLM2 answering from the passages it is given), and the `closed_book` technique answers the same question
from the reader's memory alone, for comparison:

    InMemoryBM25Retriever -> [oracle: CorpusInContextPromptBuilder -> LocalChatReader]
    question ---------------> [closed_book: prompt -> LocalChatReader]

Both name the same model, so it loads once. `icr2_components.resources.shipped_names("pipelines")` lists the names;
a YAML of your own is given by its path.

Needs: pip install "icr2-components[local]". Run: python technique_as_component.py
"""

from haystack import Pipeline
from haystack.components.retrievers import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from nq_open import first_question, nq_documents

from icr2_components import technique_component


def build_pipeline(document_store: InMemoryDocumentStore) -> Pipeline:
    """Your pipeline with two techniques in it; their models load on the first run."""
    pipeline = Pipeline()
    pipeline.add_component("retriever", InMemoryBM25Retriever(document_store=document_store, top_k=3))
    # Inputs `query` and `documents`, output `replies`: what oracle.yaml declares.
    pipeline.add_component("with_passages", technique_component("oracle"))
    # Input `query`, output `replies`.
    pipeline.add_component("closed_book", technique_component("closed_book"))
    pipeline.connect("retriever.documents", "with_passages.documents")
    return pipeline


def ask(pipeline: Pipeline, question: str) -> tuple[str, str]:
    """Runs the pipeline; returns the answer from the retrieved passages and the closed-book answer."""
    result = pipeline.run(
        {"retriever": {"query": question}, "with_passages": {"query": question}, "closed_book": {"query": question}}
    )
    return result["with_passages"]["replies"][0].text, result["closed_book"]["replies"][0].text


def main() -> None:
    document_store = InMemoryDocumentStore()
    document_store.write_documents(nq_documents(limit=300))
    pipeline = build_pipeline(document_store)
    question, gold_answers = first_question()
    answer, closed_book_answer = ask(pipeline, question)
    print(f"question: {question}")
    print(f"answer: {answer}")
    print(f"closed-book answer: {closed_book_answer}")
    print(f"gold: {' | '.join(gold_answers)}")


if __name__ == "__main__":
    main()
