"""Passage and query embedding with the shared sentence-transformers model.

Documents are embedded as ``"<title>\\n<content>"`` (the DPR convention, and what Haystack's
``SentenceTransformersDocumentEmbedder`` does with ``meta_fields_to_embed=["title"]``), in streaming batches so
that a 36M-passage corpus never sits in memory.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import islice
from typing import Iterable, Iterator

from haystack import Document

from icr2_components.models.cache import MODEL_CACHE


def text_to_embed(document: Document, meta_fields: list[str]) -> str:
    parts = [str(document.meta[field]) for field in meta_fields if document.meta.get(field)]
    parts.append(document.content or "")
    return "\n".join(parts)


class PassageEmbedder:
    """Embeds documents and queries with one shared model; the dimension is known after warm-up."""

    def __init__(self, model: str = "all-minilm-l6-v2", batch_size: int = 64, meta_fields: list[str] | None = None, device: str | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        self.model = model
        self.batch_size = batch_size
        self.meta_fields = list(meta_fields if meta_fields is not None else ["title"])
        self.device = device
        self._model = None

    def warm_up(self):
        if self._model is None:
            self._model = MODEL_CACHE.sentence_transformer(self.model, device=self.device)
        return self._model

    @property
    def dimension(self) -> int:
        model = self.warm_up()
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        model = self.warm_up()
        vectors = model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True)
        return vectors.tolist()

    def embed_query(self, query: str) -> list[float]:
        return self.embed_texts([query])[0]

    def embed_stream(self, documents: Iterable[Document]) -> Iterator[Document]:
        """Yield the documents with ``embedding`` set, batch by batch, preserving order."""
        iterator = iter(documents)
        while batch := list(islice(iterator, self.batch_size * 4)):
            vectors = self.embed_texts([text_to_embed(doc, self.meta_fields) for doc in batch])
            for document, vector in zip(batch, vectors):
                yield replace(document, embedding=vector)
