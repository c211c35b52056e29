"""Retrieval attention probing (RAP) in front of a reader: the reader's own retrieval heads pick the passages.

ICR2 (https://arxiv.org/abs/2501.08248, section 4.2) finds attention heads of a reader that look at the passage
holding the answer. `RetrievalAttentionFilter` runs the reader once over the corpus in context, keeps each probed
head's top passage, and the reader then answers from those alone:

    InMemoryBM25Retriever -> ConfounderAwareCorpusBuilder -> RetrievalAttentionFilter
        -> CorpusInContextPromptBuilder -> LocalChatReader

The heads are the shipped artifact `rap_heads_smollm2`, probed on SmolLM2-135M-Instruct (`icr2 probe-heads`
writes one for another reader). The filter and the reader name the same model and dtype, so the weights load once.

Needs: pip install "icr2-components[local]". Run: python rap_reader.py
"""

from haystack import Pipeline
from haystack.components.retrievers import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from nq_open import first_question, nq_documents

from icr2_components.builders import ConfounderAwareCorpusBuilder, CorpusInContextPromptBuilder
from icr2_components.filters import RetrievalAttentionFilter
from icr2_components.readers import LocalChatReader

READER = "smollm2-135m-instruct"


def build_pipeline(document_store: InMemoryDocumentStore) -> Pipeline:
    """The RAP pipeline over `document_store`; the artifact and the model load on the first run."""
    pipeline = Pipeline()
    pipeline.add_component("retriever", InMemoryBM25Retriever(document_store=document_store, top_k=8))
    # ICR2's corpus: up to 6 BM25 passages, shuffled (the reader should not learn that the first is best).
    pipeline.add_component("corpus", ConfounderAwareCorpusBuilder(retrievers=["bm25"], budget_passages=6))
    # The artifact's 4 best heads each keep their top passage (M = 1); the reader sees the union of their picks.
    rap = RetrievalAttentionFilter(artifact="rap_heads_smollm2", model=READER, top_m=1, num_heads=4, dtype="float32")
    pipeline.add_component("rap", rap)
    pipeline.add_component("prompt_builder", CorpusInContextPromptBuilder(answer_instruction="retrievalqa"))
    pipeline.add_component("reader", LocalChatReader(model=READER, max_new_tokens=24, dtype="float32"))

    pipeline.connect("retriever.documents", "corpus.bm25")
    pipeline.connect("corpus.documents", "rap.documents")
    pipeline.connect("rap.documents", "prompt_builder.documents")
    pipeline.connect("prompt_builder.prompt", "reader.messages")
    return pipeline


def ask(pipeline: Pipeline, question: str) -> tuple[str, list]:
    """Runs the pipeline on one question; returns the answer and the passages RAP kept."""
    inputs = {name: {"query": question} for name in ("retriever", "corpus", "rap", "prompt_builder")}
    result = pipeline.run(inputs, include_outputs_from={"rap"})
    return result["reader"]["replies"][0].text, result["rap"]["documents"]


def main() -> None:
    document_store = InMemoryDocumentStore()
    document_store.write_documents(nq_documents(limit=300))
    pipeline = build_pipeline(document_store)
    question, gold_answers = first_question()
    answer, kept = ask(pipeline, question)
    print(f"question: {question}")
    print(f"kept by the retrieval heads: {len(kept)} passage(s): {' | '.join(d.meta['title'] for d in kept)}")
    print(f"answer: {answer}")
    print(f"gold: {' | '.join(gold_answers)}")


if __name__ == "__main__":
    main()
