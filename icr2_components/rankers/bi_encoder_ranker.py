"""BiEncoderRanker: re-ranks retrieved passages by the cosine of query and passage embeddings (or a cross-encoder)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from haystack import Document, component

from icr2_components.models.cache import MODEL_CACHE
from icr2_components.parameters import document_list, override, positive_int
from icr2_components.text.blank import is_blank

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder, SentenceTransformer


@component
class BiEncoderRanker:
    """
    Re-ranks passages by the cosine similarity of the query's and each passage's ("title\\ncontent") embeddings
    under a sentence-transformers bi-encoder, and keeps the top K, best first (`score` holds the cosine).

    Haystack's `SentenceTransformersSimilarityRanker` needs cross-encoder weights, and
    `SentenceTransformersDiversityRanker` orders for diversity and loads its own copy of the model; this ranker
    takes the bi-encoder from the shared `MODEL_CACHE` (the dense retriever's all-MiniLM-L6-v2 by default, so one
    copy serves both). Given `cross_encoder` (a local path or Hugging Face id of a cross-encoder), it scores
    (query, passage) pairs with `sentence_transformers.CrossEncoder` instead. These are the re-ranking baselines
    (MiniLM, TinyBERT) of ICR2 ([Qiu et al. 2025](https://arxiv.org/abs/2501.08248), appendix D).

    Usage example:
    ```python
    from haystack import Document
    from icr2_components.rankers.bi_encoder_ranker import BiEncoderRanker

    ranker = BiEncoderRanker(top_k=2)
    ranker.warm_up()
    docs = [Document(content="Paris is the capital of France.", meta={"title": "Paris"}),
            Document(content="Berlin is in Germany.", meta={"title": "Berlin"})]
    print(ranker.run(query="capital of France", documents=docs)["documents"][0].meta["title"])  # Paris
    ```
    """

    def __init__(self, model: str = "all-minilm-l6-v2", top_k: int | None = 3, cross_encoder: str | None = None,
                 device: str | None = None, batch_size: int = 32) -> None:
        """
        :param model: Bi-encoder: bundled alias, local path or Hugging Face id (through `MODEL_CACHE`).
        :param top_k: Passages kept (None: all, re-ordered).
        :param cross_encoder: A cross-encoder's path or id; when given, it scores the pairs and `model` is unused.
        :param device: `cpu`, `cuda`...; the best available by default.
        :param batch_size: Passages embedded (or pairs scored) per batch.
        """
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model must name a sentence-transformers bi-encoder (alias, path or Hugging Face id).")
        positive_int(top_k, "top_k", optional=True, hint=" (keep all)")
        if cross_encoder is not None and (not isinstance(cross_encoder, str) or not cross_encoder.strip()):
            raise ValueError("cross_encoder must be a cross-encoder's local path or Hugging Face id, or None.")
        positive_int(batch_size, "batch_size")
        self.model = model
        self.top_k = top_k
        self.cross_encoder = cross_encoder
        self.device = device
        self.batch_size = batch_size
        self._encoder: SentenceTransformer | None = None
        self._cross: CrossEncoder | None = None

    def warm_up(self) -> None:
        if self.cross_encoder is not None:
            if self._cross is None:
                from sentence_transformers import CrossEncoder

                from icr2_components.models.cache import default_device

                self._cross = CrossEncoder(self.cross_encoder, device=self.device or default_device())
        elif self._encoder is None:
            self._encoder = MODEL_CACHE.sentence_transformer(self.model, device=self.device)

    @staticmethod
    def passage_text(document: Document) -> str:
        title = (document.meta or {}).get("title")
        return f"{title}\n{document.content or ''}" if title else (document.content or "")

    @component.output_types(documents=list[Document])
    def run(self, query: str, documents: list[Document], top_k: int | None = None) -> dict[str, Any]:
        """
        :param query: The question.
        :param documents: Candidates (any order).
        :param top_k: Overrides the init value for this call (checked as at init: a positive integer).
        :returns: `documents`: the top K by score, best first, each a copy with `score` set.
        :raises ValueError: an empty query, `top_k` not a positive integer, or a document with no text (content
            None, blank, or only characters that print nothing): the embedding of an empty passage is not a
            relevance and could rank it first, so it is refused, naming it; drop such documents upstream.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"BiEncoderRanker.run needs a non-empty query, got {query!r:.60}.")
        k = override(positive_int(top_k, "top_k", optional=True, hint=" (keep all)"), self.top_k)
        document_list(documents)
        for document in documents:
            if not isinstance(document.content, str) or is_blank(document.content):
                raise ValueError(
                    f"Document {document.id} has no text (content {document.content!r:.40}); a ranker cannot score "
                    "it. Drop documents without text upstream."
                )
        if not documents:
            return {"documents": []}
        self.warm_up()
        texts = [self.passage_text(d) for d in documents]
        if self._cross is not None:
            scores = [float(s) for s in self._cross.predict([(query, t) for t in texts], batch_size=self.batch_size)]
        else:
            assert self._encoder is not None  # warm_up loads it when no cross-encoder is set
            embeddings = self._encoder.encode([query, *texts], batch_size=self.batch_size,
                                              normalize_embeddings=True, convert_to_numpy=True)
            scores = [float(s) for s in embeddings[1:] @ embeddings[0]]
        order = sorted(range(len(documents)), key=lambda i: -scores[i])  # stable: ties keep retrieval order
        kept = order[:k] if k is not None else order
        return {"documents": [replace(documents[i], score=scores[i]) for i in kept]}
