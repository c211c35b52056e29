"""Embedding as its own resumable pass: ``icr2 embed CONFIG --out DIR`` writes vector shards keyed by passage id,
and an index config with ``embedding.vectors_dir: DIR`` later writes those vectors into its store unrecomputed.

So one machine (with GPUs, or many CPU processes) embeds while Elasticsearch indexes BM25 elsewhere, and the
vectors are added when they are ready.

The folder::

    DIR/manifest.json          what the shards hold (corpus fingerprint, model, backend, shard size, dimension)
                               and the finished shards, in order, each with its count, first and last id and the
                               SHA-256 of its two files; sealed with its own content hash; rewritten atomically
                               after each shard
    DIR/shard-00000.npy        float32 [n, dim], unit-norm, row i the passage on line i of the ids file
    DIR/shard-00000.ids.txt    the n passage ids, one a line

The shards hold the corpus stream in order, at most ``shard_size`` passages each; a shard is also closed once
``shard_seconds`` passed since it was begun, so that a slow pass (a CPU) records its work every few seconds. A
shard counts once it is in the manifest (its two files are written first, each through a temporary file and a
rename), so a run killed at any moment (SIGKILL included) leaves whole shards only and loses at most the last
``shard_seconds`` of work; a re-run reads past the finished shards' passages without embedding them (checking
their ids against the manifest and the last one's files against their hashes), rewrites the unfinished shard and
goes on. No passage is embedded twice and none is written twice. A shard file that does not match its hash, or
a manifest that does not match its own, is a :class:`ShardsMismatchError` naming the file.

Usage:
    >>> from icr2_components.stores import load_index_config
    >>> from icr2_components.stores.embedding_shards import embed_to_shards
    >>> report = embed_to_shards(load_index_config("indexing/kilt-sample.yaml"), "runs/vectors")
    >>> report.passages_embedded, report.resumed_passages, report.complete
    (3717, 0, True)

then ``embedding: {vectors_dir: runs/vectors}`` in the index config (or ``icr2 index --config ... --set
embedding.vectors_dir=runs/vectors``) takes the vectors from the shards. Queries are still embedded by the
model, with the same backend.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from dataclasses import replace as dataclass_replace
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document

from icr2_components.errors import UserInputError
from icr2_components.paths import output_folder_problem
from icr2_components.records.integrity import (
    DamagedFileError,
    atomic_write_bytes,
    read_sealed_json,
    write_sealed_json,
)
from icr2_components.stores.embedding import PassageEmbedder, text_to_embed

MANIFEST = "manifest.json"
# 2: the manifest is sealed and records each shard's file hashes
SHARDS_VERSION = 2
DEFAULT_SHARD_SIZE = 10_000
DEFAULT_SHARD_SECONDS = 10.0


class ShardsMismatchError(UserInputError):
    """The shards folder was written for another corpus, model, backend or shard size; the message says which."""


class MissingVectorError(UserInputError):
    """A passage has no vector in the shards folder (the pass is unfinished, or another corpus); says what to run."""


@dataclass
class EmbedReport:
    """What an ``icr2 embed`` run did."""

    out_dir: str
    # passages embedded and written this run
    passages_embedded: int = 0
    # passages of shards a previous run had finished: read past, not embedded again
    resumed_passages: int = 0
    # the corpus reader's skips (bad lines, repeated articles, articles with no text): counts and examples
    skips: dict = field(default_factory=dict)
    shards_written: int = 0
    shards_total: int = 0
    passages_total: int = 0
    # the whole corpus is in the shards (False: stopped by max_shards or a kill; run again to finish)
    complete: bool = False
    seconds: float = 0.0
    passages_per_second: float = 0.0
    backend: str = "fp32"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _atomic_write(path: Path, write) -> str:
    """Write ``path`` atomically (records/integrity.py); returns the SHA-256 of what was written."""
    digest = hashlib.sha256()

    def write_hashed(stream) -> None:
        class Hashing:
            def write(self, data) -> int:
                digest.update(data)
                return stream.write(data)

        write(Hashing())

    atomic_write_bytes(path, write_hashed)
    return digest.hexdigest()


def _write_json(path: Path, data: dict) -> None:
    write_sealed_json(path, data)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_shard_files(folder: Path, shard: dict) -> None:
    """The shard's two files are those the manifest recorded (their SHA-256); :class:`ShardsMismatchError`
    names the file otherwise."""
    for name_key, hash_key in (("file", "file_sha256"), ("ids", "ids_sha256")):
        path = folder / shard[name_key]
        if not path.is_file():
            raise ShardsMismatchError(f"{path} is missing (the manifest lists it in shard {shard['index']}); delete "
                                      f"{folder} and run `icr2 embed` again.")
        actual = _file_sha256(path)
        if actual != shard.get(hash_key):
            raise ShardsMismatchError(
                f"{path} does not match the SHA-256 the manifest recorded for shard {shard['index']} "
                f"({str(shard.get(hash_key))[:12]}..., file {actual[:12]}...): it was changed or damaged after it was "
                f"written; delete {folder} and run `icr2 embed` again."
            )


def shard_names(index: int) -> tuple[str, str]:
    return f"shard-{index:05d}.npy", f"shard-{index:05d}.ids.txt"


def read_manifest(folder: str | os.PathLike) -> dict:
    path = Path(folder) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(
            f"{folder} holds no {MANIFEST}: it is not a folder written by `icr2 embed CONFIG --out {folder}`."
        )
    try:
        return read_sealed_json(path, "embedding manifest")
    except DamagedFileError as error:
        raise ShardsMismatchError(f"{error} Delete {folder} and run `icr2 embed` again.") from None


def _identity(config, dimension: int, shard_size: int) -> dict:
    from icr2_components.stores.config import config_fingerprint

    return {
        "version": SHARDS_VERSION,
        "corpus_fingerprint": config_fingerprint(config),
        "model": config.embedding.model,
        "backend": config.embedding.backend,
        "meta_fields_to_embed": list(config.embedding.meta_fields_to_embed),
        "shard_size": shard_size,
        "dimension": dimension,
    }


def embed_to_shards(
    config,
    out_dir: str | os.PathLike,
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
    max_shards: int | None = None,
    progress: bool = True,
    embedder: PassageEmbedder | None = None,
    shard_seconds: float = DEFAULT_SHARD_SECONDS,
) -> EmbedReport:
    """Embed the config's corpus into vector shards in ``out_dir``, resuming a previous run there.

    :param config: an :class:`~icr2_components.stores.config.IndexConfig` (its ``corpus`` and ``embedding``
        sections are read; the store is not touched).
    :param shard_size: passages per shard (fixed for a folder: a resume with another size is an error).
    :param max_shards: stop after writing this many new shards (a partial run; the next run resumes there).
    :param embedder: the passage embedder (default: built from ``config.embedding``).
    :param shard_seconds: close a shard once this many seconds passed since it was begun (at the end of the batch
        being embedded), so a kill loses at most about this much work.
    """
    from tqdm.auto import tqdm

    _check_embed_request(config, out_dir, shard_size, max_shards, shard_seconds)
    started = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    own_embedder = embedder is None
    embedder = embedder or passage_embedder(config.embedding)
    manifest_path = out / MANIFEST
    manifest = _opened_manifest(out, _identity(config, embedder.dimension, shard_size))

    source = corpus_source(config)
    stream = source.documents()
    report = EmbedReport(out_dir=str(out), backend=config.embedding.backend)
    finished = list(manifest["shards"])
    if finished:  # the shard a kill was most likely to reach (the others were checked when they were last)
        check_shard_files(out, finished[-1])
    bar = tqdm(unit=" passages", desc=f"embedding into {out}", disable=not progress, smoothing=0.05)
    try:
        _read_past_finished_shards(stream, out, finished, report, bar)
        bar.set_postfix(resumed=report.resumed_passages, skipped=_skip_total(source))
        index = len(finished)
        exhausted = False
        while True:
            if max_shards is not None and report.shards_written >= max_shards:
                break  # a partial run: the next one resumes here
            batch, parts, ended = _embed_next_shard(stream, embedder, shard_size, shard_seconds)
            if not batch:
                exhausted = True
                break
            manifest["shards"].append(_write_shard(out, index, batch, np.concatenate(parts)))
            manifest["passages"] = sum(shard["count"] for shard in manifest["shards"])
            _write_json(manifest_path, manifest)
            index += 1
            report.shards_written += 1
            report.passages_embedded += len(batch)
            bar.update(len(batch))
            bar.set_postfix(resumed=report.resumed_passages, skipped=_skip_total(source))
            if ended:
                exhausted = True
                break
        if exhausted and not manifest["complete"]:
            # a corpus whose length is a multiple of shard_size ends on an empty read, handled above
            manifest["complete"] = True
            _write_json(manifest_path, manifest)
    finally:
        bar.close()
        if own_embedder:
            embedder.close()
    report.skips = source.skips.as_dict()
    report.shards_total = len(manifest["shards"])
    report.passages_total = int(manifest["passages"])
    report.complete = bool(manifest["complete"])
    report.seconds = time.perf_counter() - started
    report.passages_per_second = report.passages_embedded / report.seconds if report.seconds else 0.0
    return report


def _check_embed_request(config, out_dir: str | os.PathLike, shard_size: int, max_shards: int | None,
                         shard_seconds: float) -> None:
    """Refuse shard settings out of range, an output folder that cannot hold shards, and a config that does not
    embed (or reads its vectors from shards already)."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}.")
    if max_shards is not None and max_shards < 0:
        raise ValueError(f"max_shards must be >= 0 or None, got {max_shards}.")
    if isinstance(shard_seconds, bool) or not isinstance(shard_seconds, (int, float)) or not shard_seconds > 0:
        raise ValueError(f"shard_seconds must be a positive number of seconds, got {shard_seconds!r}.")
    problem = output_folder_problem(out_dir)
    if problem:
        raise UserInputError(f"--out cannot hold the shards: {problem}.")
    if not config.embedding.enabled:
        raise UserInputError(
            f"index config '{config.name}' has embedding.enabled: false; turn it on to embed its corpus."
        )
    if config.embedding.vectors_dir:
        raise UserInputError(
            "embedding.vectors_dir is set: that config reads vectors from shards; remove it to write them."
        )


def _opened_manifest(out: Path, identity: dict) -> dict:
    """The folder's manifest, checked against this pass's ``identity``; a new one (written) in a new folder.

    :raises ShardsMismatchError: the folder holds shards of another pass.
    """
    manifest_path = out / MANIFEST
    if manifest_path.exists():
        manifest = read_manifest(out)
        different = {key: (manifest.get(key), value) for key, value in identity.items() if manifest.get(key) != value}
        if different:
            detail = "; ".join(f"{key}: folder {old!r}, config {new!r}" for key, (old, new) in different.items())
            raise ShardsMismatchError(
                f"{out} holds shards of another pass ({detail}); use another --out folder or delete this one."
            )
        return manifest
    manifest = {**identity, "shards": [], "complete": False, "passages": 0}
    _write_json(manifest_path, manifest)
    return manifest


def _read_past_finished_shards(stream: Iterator[Document], out: Path, finished: list[dict], report: EmbedReport,
                               bar) -> None:
    """Advance ``stream`` past the passages of the finished shards, checking the ids the manifest recorded.

    :raises ShardsMismatchError: the corpus no longer gives those passages there.
    """
    for shard in finished:
        ids = [document.id for document in islice(stream, shard["count"])]
        if len(ids) != shard["count"] or ids[0] != shard["first_id"] or ids[-1] != shard["last_id"]:
            raise ShardsMismatchError(
                f"{out}: shard {shard['index']} was written from another corpus stream (ids "
                f"{shard['first_id']}..{shard['last_id']}, "
                f"the corpus now gives {ids[0] if ids else None}..{ids[-1] if ids else None}); use another --out "
                "folder."
            )
        report.resumed_passages += len(ids)
        bar.update(len(ids))


def _embed_next_shard(stream: Iterator[Document], embedder: PassageEmbedder, shard_size: int,
                      shard_seconds: float) -> tuple[list[Document], list[np.ndarray], bool]:
    """The next shard's passages and their vectors (in parts), embedded a few batches at a time until the shard is
    full or ``shard_seconds`` passed.

    :returns: ``(passages, vector parts, whether the stream ended)``; no passages once the stream is exhausted.
    """
    batch: list[Document] = []
    parts: list[np.ndarray] = []
    begun = time.monotonic()
    ended = False
    while len(batch) < shard_size and time.monotonic() - begun < shard_seconds:
        wanted = min(shard_size - len(batch), embedder.batch_size * 4)
        step = list(islice(stream, wanted))
        if step:
            texts = [text_to_embed(doc, embedder.meta_fields) for doc in step]
            parts.append(np.asarray(embedder.embed_array(texts), dtype=np.float32))
            batch.extend(step)
        if len(step) < wanted:
            ended = True
            break
    return batch, parts, ended


def _write_shard(out: Path, index: int, batch: list[Document], vectors: np.ndarray) -> dict:
    """Write shard ``index`` (its ids file, then its vectors, each atomically) and return its manifest entry."""
    vector_name, ids_name = shard_names(index)
    ids_sha256 = _atomic_write(out / ids_name, lambda s: s.write(("\n".join(doc.id for doc in batch) + "\n").encode()))
    file_sha256 = _atomic_write(out / vector_name, lambda s: np.save(s, vectors))
    return {
        "index": index,
        "file": vector_name,
        "ids": ids_name,
        "count": len(batch),
        "first_id": batch[0].id,
        "last_id": batch[-1].id,
        "file_sha256": file_sha256,
        "ids_sha256": ids_sha256,
    }


def corpus_source(config):
    """The config's corpus reader (as ``IndexHandle.source()``, without opening a store)."""
    from icr2_components.corpora import corpus_reader

    return corpus_reader(config.corpus)


def _skip_total(source) -> int:
    return int(source.skips.as_dict().get("total", 0))


class ShardVectors:
    """Read the vectors of an ``icr2 embed`` folder by passage id.

    Reading follows the shards in order (the way the corpus is indexed), one shard in memory at a time; an id
    out of that order (a writer resuming mid-corpus) is looked for in the following shards' ids files, one file
    at a time; a stream in another order altogether (after a few such jumps) gets an index of every id, built
    once from the ids files (ids only, no vectors).

    Usage:
        >>> vectors = ShardVectors("runs/vectors")
        >>> vectors.vector("90000000-w100-00000").shape
        (384,)
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        self.shards = list(self.manifest["shards"])
        self.dimension = int(self.manifest["dimension"])
        self._loaded: int | None = None
        self._vectors: np.ndarray | None = None
        self._ids: list[str] = []
        self._rows: dict[str, int] | None = None
        self._cursor = 0
        self._jumps = 0
        self._where: dict[str, int] | None = None

    def __len__(self) -> int:
        return int(self.manifest["passages"])

    def _load(self, index: int) -> None:
        shard = self.shards[index]
        check_shard_files(self.folder, shard)
        self._vectors = np.load(self.folder / shard["file"], mmap_mode="r")
        self._ids = (self.folder / shard["ids"]).read_text().splitlines()
        if len(self._ids) != self._vectors.shape[0] or len(self._ids) != shard["count"]:
            raise ShardsMismatchError(
                f"{self.folder}: shard {index} has {len(self._ids)} ids and {self._vectors.shape[0]} vectors "
                f"(manifest: {shard['count']}); delete the folder and run `icr2 embed` again."
            )
        self._loaded, self._rows, self._cursor = index, None, 0

    def vector(self, passage_id: str) -> np.ndarray:
        if self._loaded is None:
            if not self.shards:
                self._missing(passage_id)
            self._load(0)
        if self._cursor < len(self._ids) and self._ids[self._cursor] == passage_id:
            row = self._cursor
        elif (
            self._cursor == len(self._ids)
            and self._loaded + 1 < len(self.shards)
            and self.shards[self._loaded + 1]["first_id"] == passage_id
        ):
            self._load(self._loaded + 1)
            row = 0
        else:
            row = self._seek(passage_id)
        self._cursor = row + 1
        return np.asarray(self._vectors[row], dtype=np.float32)

    def _seek(self, passage_id: str) -> int:
        """The row of an id out of order: in the loaded shard, else the shards after it (then before it) by their
        ids files one at a time (a resume: once); after a few such jumps, an index of every id (ids only)."""
        if self._rows is None:
            self._rows = {pid: row for row, pid in enumerate(self._ids)}
        if passage_id in self._rows:
            return self._rows[passage_id]
        self._jumps += 1
        if self._jumps > 3 and self._where is None:
            self._where = {
                pid: index
                for index, shard in enumerate(self.shards)
                for pid in (self.folder / shard["ids"]).read_text().splitlines()
            }
        if self._where is not None:
            index = self._where.get(passage_id)
        else:
            after = range(self._loaded + 1, len(self.shards))
            index = next(
                (
                    i
                    for i in [*after, *range(0, self._loaded)]
                    if passage_id in (self.folder / self.shards[i]["ids"]).read_text().splitlines()
                ),
                None,
            )
        if index is None:
            self._missing(passage_id)
        self._load(index)
        self._rows = {pid: row for row, pid in enumerate(self._ids)}
        return self._rows[passage_id]

    def _missing(self, passage_id: str) -> None:
        state = "complete" if self.manifest.get("complete") else "unfinished"
        raise MissingVectorError(
            f"passage {passage_id!r} has no vector in {self.folder} ({len(self)} passages in {len(self.shards)} "
            f"shards, {state}); "
            f"finish the pass with `icr2 embed CONFIG --out {self.folder}` for this corpus, or unset "
            "embedding.vectors_dir."
        )


class ShardVectorEmbedder(PassageEmbedder):
    """A :class:`PassageEmbedder` whose passages get their vectors from ``icr2 embed`` shards, not the model.

    The index's writer calls :meth:`embed_stream` as it would the model's; queries (and :meth:`embed_texts` for
    free text) still go through the model with the configured backend. The folder must have been written with
    the same model, backend and embedded meta fields as the config says (checked here).

    Usage:
        >>> embedder = ShardVectorEmbedder("runs/vectors", "all-minilm-l6-v2", backend="onnx")
        >>> next(embedder.embed_stream(documents)).embedding   # the shard's vector for that passage id
    """

    def __init__(self, vectors_dir: str | os.PathLike, model: str = "all-minilm-l6-v2", **kwargs) -> None:
        super().__init__(model, **kwargs)
        self.vectors_dir = Path(vectors_dir)
        manifest = read_manifest(self.vectors_dir)
        expected = {"model": model, "backend": self.backend, "meta_fields_to_embed": self.meta_fields}
        different = {key: (manifest.get(key), value) for key, value in expected.items() if manifest.get(key) != value}
        if different:
            detail = "; ".join(f"{key}: shards {old!r}, config {new!r}" for key, (old, new) in different.items())
            raise ShardsMismatchError(
                f"embedding.vectors_dir {vectors_dir} was embedded differently ({detail}); embed again with this "
                "config or fix the config."
            )
        self._dimension = int(manifest["dimension"])
        self.passages_from_shards = 0

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed_stream(self, documents: Iterable[Document]) -> Iterator[Document]:
        """Yield the documents with their shard vectors set, in order; a passage with no vector is an error."""
        vectors = ShardVectors(self.vectors_dir)
        for document in documents:
            vector = vectors.vector(document.id)
            self.passages_from_shards += 1
            yield dataclass_replace(document, embedding=vector.tolist())


def passage_embedder(embedding) -> PassageEmbedder:
    """The embedder an index config's ``embedding:`` section asks for (vectors from shards when ``vectors_dir`` is
    set)."""
    kwargs = dict(
        batch_size=embedding.batch_size,
        meta_fields=embedding.meta_fields_to_embed,
        device=embedding.device,
        backend=embedding.backend,
        devices=embedding.devices,
        processes=embedding.processes,
        threads=embedding.threads,
    )
    if embedding.vectors_dir:
        return ShardVectorEmbedder(embedding.vectors_dir, embedding.model, **kwargs)
    return PassageEmbedder(embedding.model, **kwargs)
