"""Adaptive RAG: a gate decides per question whether to retrieve, and a `BranchJoiner` takes whichever prompt ran.

RetrievalQA (https://arxiv.org/abs/2402.16457) retrieves only when the reader needs it. `TimeAwareRetrievalGate`
sends the question to its `retrieve` output or its `no_retrieval` output, never both; Haystack runs only the branch
that received it, and its `BranchJoiner` passes the one prompt that arrives on to a single reader:

    gate --retrieve-----> InMemoryBM25Retriever -> CorpusInContextPromptBuilder --+
         --no_retrieval-> ChatPromptBuilder (closed book) -------------------------+-> BranchJoiner -> LocalChatReader

The gate is the library's shipped learned gate (`adaptive_rag.learned`: nearest neighbours over the question's
MiniLM embedding, trained on SmolLM2-135M's own need labels). For that small reader no question was worth skipping
retrieval for, so it sends every question to retrieval (docs/benchmarks/gate.md, "Gates that pay off"); a gate
trained for a
capable reader, or `method="ta_are"` with one, skips retrieval where the reader knows the answer.

Needs: pip install "icr2-components[local]". Run: python adaptive_rag.py
"""

from haystack import Pipeline
from haystack.components.builders import ChatPromptBuilder
from haystack.components.joiners import BranchJoiner
from haystack.components.retrievers import InMemoryBM25Retriever
from haystack.dataclasses import ChatMessage
from haystack.document_stores.in_memory import InMemoryDocumentStore
from nq_open import first_question, nq_documents

from icr2_components.builders import CorpusInContextPromptBuilder
from icr2_components.gates import TimeAwareRetrievalGate
from icr2_components.readers import LocalChatReader

# RetrievalQA's closed-book prompt (its Figure 7).
CLOSED_BOOK = [
    ChatMessage.from_user(
        "Please use your own knowledge to answer the questions. Only include the answer in your response and try "
        'to be concise. If you do not know the answer, just say "I don\'t know".\n\nQuestion: {{ query }}\n\nAnswer:'
    )
]


def build_pipeline(document_store: InMemoryDocumentStore) -> Pipeline:
    """The adaptive pipeline over `document_store`; the gate's embedder and the reader load on the first run."""
    pipeline = Pipeline()
    # A shipped artifact is named by name; a gate of your own (icr2 train-gate) by its path.
    pipeline.add_component(
        "gate", TimeAwareRetrievalGate(method="learned", model=None, artifact="adaptive_rag.learned")
    )
    pipeline.add_component("retriever", InMemoryBM25Retriever(document_store=document_store, top_k=3))
    pipeline.add_component(
        "rag_prompt", CorpusInContextPromptBuilder(query_aware=True, answer_instruction="retrievalqa")
    )
    pipeline.add_component("closed_book_prompt", ChatPromptBuilder(template=CLOSED_BOOK, required_variables=["query"]))
    pipeline.add_component("prompt", BranchJoiner(list[ChatMessage]))
    pipeline.add_component("reader", LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=24))

    pipeline.connect("gate.retrieve", "retriever.query")
    pipeline.connect("gate.retrieve", "rag_prompt.query")
    pipeline.connect("retriever.documents", "rag_prompt.documents")
    pipeline.connect("gate.no_retrieval", "closed_book_prompt.query")
    pipeline.connect("rag_prompt.prompt", "prompt.value")
    pipeline.connect("closed_book_prompt.prompt", "prompt.value")
    pipeline.connect("prompt.value", "reader.messages")
    return pipeline


def ask(pipeline: Pipeline, question: str) -> tuple[str, dict]:
    """Runs the pipeline on one question; returns the answer and the gate's decision."""
    result = pipeline.run({"gate": {"query": question}})
    return result["reader"]["replies"][0].text, result["gate"]["decision"]


def main() -> None:
    document_store = InMemoryDocumentStore()
    document_store.write_documents(nq_documents(limit=300))
    pipeline = build_pipeline(document_store)
    question, gold_answers = first_question()
    answer, decision = ask(pipeline, question)
    print(f"question: {question}")
    print(f"gate: {'retrieve' if decision['retrieve'] else 'no_retrieval'} (score {decision['p_yes']:.2f})")
    print(f"answer: {answer}")
    print(f"gold: {' | '.join(gold_answers)}")


if __name__ == "__main__":
    main()
