"""Counting a passage's cost in the reader's tokens, as it appears in the corpus-in-context prompt.

A passage costs the tokens of ``"\\n\\n" + "ID: PSG000\\nTitle: ...\\nContext: ..."``: its block with the
separator in front. With byte-level BPE tokenizers (SmolLM2, Llama 3, Qwen, GPT-2) the pre-tokenizer splits
at the separator, so the corpus tokenized as a whole never has more tokens than the sum of its passages'
costs (the first passage has no separator in front, which leaves a margin of the separator's tokens).
Ids of 1,000 and more render one digit longer than ``PSG000``; contexts that large should leave a margin.

Counts are cached by (title, text): benchmark construction sees the same passages for many queries.

Counts stored at indexing: an index config's ``corpus.count_tokens_for`` names tokenizers (default: the bundled
reader's); indexing stores each passage's cost in its meta, ``token_counts: {<tokenizer fingerprint>: n}``
(:func:`with_token_counts`), in the in-memory store and Elasticsearch alike. A counter uses a stored count only
under its own :func:`tokenizer_fingerprint`, a hash of the tokenizer's whole definition and of the passage block
format, so a changed tokenizer or template never reads another's counts: it counts, as without them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

from haystack import Document

from icr2_components.text.templates import PASSAGE_SEPARATOR, document_title, format_passage

_PLACEHOLDER_ID = "PSG000"
logger = logging.getLogger(__name__)

#: the meta key of the counts stored with a passage at indexing: ``{tokenizer fingerprint: tokens}``
TOKEN_COUNTS_META = "token_counts"
# bump when the counting itself changes in a way the probe block below does not show (e.g. special tokens)
_COUNTING_SCHEME = "1"


def tokenizer_fingerprint(tokenizer: Any) -> str | None:
    """A short hash of what a passage's count depends on: the fast tokenizer's full definition (vocabulary,
    merges, normaliser, pre-tokeniser, added tokens) and the rendered passage block. None for a tokenizer
    without one inspectable definition (a slow Python tokenizer, a server's tokenize endpoint): its counts are
    never stored nor read back."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        return None
    probe = passage_block_for_counting(Document(content="{text}", meta={"title": "{title}"}))
    digest = hashlib.sha1()
    for part in (_COUNTING_SCHEME, probe, backend.to_str()):
        digest.update(part.encode("utf-8"))
        digest.update(b"\x1f")
    return digest.hexdigest()[:16]


def passage_block_for_counting(document: Document) -> str:
    return PASSAGE_SEPARATOR + format_passage(_PLACEHOLDER_ID, document_title(document), document.content or "")


class PassageTokenCounter:
    """Token cost of passages for one tokenizer, with a bounded cache.

    Usage:
        >>> counter = PassageTokenCounter.for_model("smollm2-135m-instruct")
        >>> counter.count(document)
        131
    """

    def __init__(self, tokenizer: Any, max_cache_entries: int = 500_000, use_stored_counts: bool = True) -> None:
        """
        :param tokenizer: a Hugging Face tokenizer (or one that behaves like it, e.g. ``ServedTokenizer``).
        :param max_cache_entries: counts kept in memory before the cache starts afresh.
        :param use_stored_counts: read a passage's count from its ``token_counts`` meta when it was stored under
            this tokenizer's fingerprint (False: always count; for checks and benchmarks).
        """
        self.tokenizer = tokenizer
        self.max_cache_entries = max_cache_entries
        self._cache: dict[tuple[str, str], int] = {}
        self.fingerprint = tokenizer_fingerprint(tokenizer)
        self.use_stored_counts = use_stored_counts and self.fingerprint is not None
        self._warned_foreign_counts = False
        backend = getattr(tokenizer, "backend_tokenizer", None)
        # The Rust tokenizer directly: the Python wrapper's per-call overhead dominates for 130-token passages.
        if backend is not None:
            self._encode_batch: Callable[[list[str]], list[int]] = lambda texts: [
                len(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)
            ]
        else:
            self._encode_batch = lambda texts: [
                len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]
            ]

    @classmethod
    def for_model(cls, model: str) -> PassageTokenCounter:
        """Counts with ``model``'s tokenizer: a bundled alias, path or Hugging Face id, or a served model's
        tokenizer written as its API URL (``http://127.0.0.1:8089/v1#smollm2-135m-instruct``), counted by the
        server's tokenize endpoint."""
        from icr2_components.models.served_model import ServedTokenizer, is_served_tokenizer, parse_served_tokenizer

        if is_served_tokenizer(model):
            url, served_name = parse_served_tokenizer(model)
            return cls(ServedTokenizer(url, served_name))
        from icr2_components.models.cache import MODEL_CACHE

        return cls(MODEL_CACHE.tokenizer(model))

    @staticmethod
    def _key(document: Document) -> tuple[str, str]:
        return document_title(document), document.content or ""

    def stored_count(self, document: Document) -> int | None:
        """The count stored with ``document`` at indexing under this tokenizer's fingerprint, or None."""
        counts = (document.meta or {}).get(TOKEN_COUNTS_META) if self.use_stored_counts else None
        if not isinstance(counts, dict):
            return None
        value = counts.get(self.fingerprint)
        if value is None and counts and not self._warned_foreign_counts:
            # an index counted for another tokenizer (or an older one of the same name): correct, but slow
            self._warned_foreign_counts = True
            logger.warning("Passages carry token counts for other tokenizers (%s), not this one (%s): counting them "
                           "instead. Add the reader's tokenizer to the index config's corpus.count_tokens_for and "
                           "re-index to read stored counts.", sorted(counts), self.fingerprint)
        return value if isinstance(value, int) else None

    def count_many(self, documents: Iterable[Document]) -> list[int]:
        documents = list(documents)
        if self.use_stored_counts:
            stored = [self.stored_count(d) for d in documents]
            if None not in stored:
                return stored  # type: ignore[return-value]
            if any(value is not None for value in stored):
                unstored = [d for d, value in zip(documents, stored, strict=True) if value is None]
                rest = iter(self._count_unstored(unstored))
                return [value if value is not None else next(rest) for value in stored]
        return self._count_unstored(documents)

    def _count_unstored(self, documents: list[Document]) -> list[int]:
        keys = [self._key(d) for d in documents]
        missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
        if missing:
            if len(self._cache) + len(missing) > self.max_cache_entries:
                # bounded memory: start afresh rather than track recency for every entry
                self._cache.clear()
                missing = list(dict.fromkeys(keys))
            counts = self._encode_batch(
                [PASSAGE_SEPARATOR + format_passage(_PLACEHOLDER_ID, title, text) for title, text in missing]
            )
            self._cache.update(zip(missing, counts, strict=True))
        return [self._cache[k] for k in keys]

    def count(self, document: Document) -> int:
        return self.count_many([document])[0]

    def count_text(self, text: str) -> int:
        return self._encode_batch([text])[0]

    def count_many_texts(self, texts: list[str]) -> list[int]:
        """Tokens of each plain text (not cached: prompts rarely repeat)."""
        return self._encode_batch(list(texts)) if texts else []

    def cache_size(self) -> int:
        return len(self._cache)


def with_token_counts(documents: Iterable[Document], counters: Sequence[PassageTokenCounter],
                      batch_size: int = 512) -> Iterator[Document]:
    """The documents, each with its cost under every counter stored in its meta (``token_counts``, keyed by
    tokenizer fingerprint), counted in batches; what indexing applies before the store is written. Counters
    without a fingerprint are skipped (their counts could not be matched later)."""
    counters = [c for c in counters if c.fingerprint is not None]
    iterator = iter(documents)
    while batch := list(islice(iterator, batch_size)):
        if counters:
            # counted afresh, never read back from meta: a re-indexed passage gets today's counts
            columns = [c._count_unstored(batch) for c in counters]
            batch = [
                dataclasses.replace(document, meta={**(document.meta or {}), TOKEN_COUNTS_META: {
                    c.fingerprint: column[position] for c, column in zip(counters, columns, strict=True)}})
                for position, document in enumerate(batch)
            ]
        yield from batch
