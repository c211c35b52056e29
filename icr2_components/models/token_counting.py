"""Counting a passage's cost in the reader's tokens, as it appears in the corpus-in-context prompt.

A passage costs the tokens of ``"\\n\\n" + "ID: PSG000\\nTitle: ...\\nContext: ..."``: its block with the
separator in front. With byte-level BPE tokenizers (SmolLM2, Llama 3, Qwen, GPT-2) the pre-tokenizer splits
at the separator, so the corpus tokenized as a whole never has more tokens than the sum of its passages'
costs (the first passage has no separator in front, which leaves a margin of the separator's tokens).
Ids of 1,000 and more render one digit longer than ``PSG000``; contexts that large should leave a margin.

Counts are cached by (title, text): benchmark construction sees the same passages for many queries.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from haystack import Document

from icr2_components.text.templates import PASSAGE_SEPARATOR, document_title, format_passage

_PLACEHOLDER_ID = "PSG000"


def passage_block_for_counting(document: Document) -> str:
    return PASSAGE_SEPARATOR + format_passage(_PLACEHOLDER_ID, document_title(document), document.content or "")


class PassageTokenCounter:
    """Token cost of passages for one tokenizer, with a bounded cache.

    Usage:
        >>> counter = PassageTokenCounter.for_model("smollm2-135m-instruct")
        >>> counter.count(document)
        131
    """

    def __init__(self, tokenizer: Any, max_cache_entries: int = 500_000) -> None:
        self.tokenizer = tokenizer
        self.max_cache_entries = max_cache_entries
        self._cache: dict[tuple[str, str], int] = {}
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
    def for_model(cls, model: str) -> "PassageTokenCounter":
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

    def count_many(self, documents: Iterable[Document]) -> list[int]:
        documents = list(documents)
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
            self._cache.update(zip(missing, counts))
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
