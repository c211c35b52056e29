"""Passage and query embedding with the shared sentence-transformers model.

Documents are embedded as ``"<title>\\n<content>"`` (the DPR convention, and what Haystack's
``SentenceTransformersDocumentEmbedder`` does with ``meta_fields_to_embed=["title"]``), in streaming batches so
that a 36M-passage corpus never sits in memory. Faster backends (ONNX Runtime fp32/int8, OpenVINO), worker pools
(several CPU processes or GPUs) and vectors read back from ``icr2 embed`` shards are set in the index config's
``embedding:`` section (:meth:`PassageEmbedder.from_config`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import islice

from haystack import Document


def text_to_embed(document: Document, meta_fields: list[str]) -> str:
    parts = [str(document.meta[field]) for field in meta_fields if document.meta.get(field)]
    parts.append(document.content or "")
    return "\n".join(parts)


class PassageEmbedder:
    """Embeds documents and queries with one shared model; the dimension is known after warm-up.

    ``backend`` picks how (see :mod:`icr2_components.models.sentence_backends`): ``fp32`` (plain
    ``SentenceTransformer.encode``, the default), ``onnx``, ``onnx-int8`` or ``openvino``. ``devices`` and
    ``processes`` start a pool of worker processes for passages (one per entry of ``devices``, times
    ``processes``; e.g. ``devices=["cuda:0", "cuda:1"]`` or ``processes=2`` on the CPU); queries are always
    embedded in this process.

    Usage:
        >>> embedder = PassageEmbedder("all-minilm-l6-v2", backend="onnx-int8", threads=2)
        >>> embedder.embed_query("who got the first nobel prize in physics")[:2]   # 384 floats, unit norm
    """

    def __init__(
        self,
        model: str = "all-minilm-l6-v2",
        batch_size: int = 64,
        meta_fields: list[str] | None = None,
        device: str | None = None,
        *,
        backend: str = "fp32",
        devices: list[str] | None = None,
        processes: int = 1,
        threads: int | None = None,
    ):
        from icr2_components.models.sentence_backends import check_backend

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}.")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1 or None, got {threads}.")
        self.model = model
        self.batch_size = batch_size
        self.meta_fields = list(meta_fields if meta_fields is not None else ["title"])
        self.device = device
        self.backend = check_backend(backend)
        self.devices = list(devices) if devices else None
        self.processes = processes
        self.threads = threads
        self._encoder = None
        self._pool = None

    @property
    def pool_devices(self) -> list[str]:
        """The worker processes' devices; one entry or none means no pool (encode in this process)."""
        base = self.devices or [self.device or "cpu"]
        return [device for device in base for _ in range(self.processes)]

    def warm_up(self):
        """Load the in-process encoder (exports the ONNX model on first use of an ONNX backend)."""
        if self._encoder is None:
            from icr2_components.models.sentence_backends import sentence_encoder

            device = self.device or (self.devices[0] if self.devices else None)
            self._encoder = sentence_encoder(self.model, backend=self.backend, device=device, threads=self.threads)
        return self._encoder

    def _passage_encoder(self):
        devices = self.pool_devices
        if len(devices) < 2:
            return self.warm_up()
        if self._pool is None:
            from icr2_components.models.sentence_backends import ProcessPoolEncoder

            self._pool = ProcessPoolEncoder(
                self.model, backend=self.backend, devices=devices, threads_per_process=self.threads or 1
            )
        return self._pool

    def close(self) -> None:
        """Stop the worker processes, if any were started."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @property
    def dimension(self) -> int:
        return int(self.warm_up().dimension)

    def embed_array(self, texts: list[str]):
        """Unit-norm float32 vectors, one row per text (through the pool when there is one)."""
        return self._passage_encoder().encode(texts, self.batch_size)

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()

    def embed_query(self, query: str) -> list[float]:
        return self.warm_up().encode([query], self.batch_size)[0].tolist()

    def embed_stream(self, documents: Iterable[Document]) -> Iterator[Document]:
        """Yield the documents with ``embedding`` set, batch by batch, preserving order."""
        iterator = iter(documents)
        while batch := list(islice(iterator, self.batch_size * 4)):
            vectors = self.embed_texts([text_to_embed(doc, self.meta_fields) for doc in batch])
            for document, vector in zip(batch, vectors, strict=True):
                yield replace(document, embedding=vector)


def validate_embedding_settings(embedding, error_class: type[Exception]) -> None:
    """Check the ``embedding:`` keys added for scale (backend, device(s), processes, threads, vectors_dir)."""
    from icr2_components.models.sentence_backends import BACKENDS, EmbeddingBackendError, check_device

    if embedding.backend not in BACKENDS:
        raise error_class(f"embedding.backend must be one of {', '.join(BACKENDS)}, got {embedding.backend!r}.")
    if embedding.processes < 1:
        raise error_class(f"embedding.processes must be >= 1, got {embedding.processes}.")
    if embedding.threads is not None and embedding.threads < 1:
        raise error_class(f"embedding.threads must be >= 1 or null, got {embedding.threads}.")
    if embedding.devices is not None:
        if not embedding.devices:
            raise error_class("embedding.devices must list at least one device (e.g. [cuda:0, cuda:1]) or be null.")
        if embedding.device is not None:
            raise error_class("embedding: give `device` (one) or `devices` (a pool), not both.")
    for device in ([embedding.device] if embedding.device is not None else []) + list(embedding.devices or []):
        try:
            check_device(device)
        except EmbeddingBackendError as error:
            raise error_class(f"embedding: {error}") from None
    if embedding.vectors_dir is not None and not str(embedding.vectors_dir).strip():
        raise error_class("embedding.vectors_dir must be a folder written by `icr2 embed` or null.")
