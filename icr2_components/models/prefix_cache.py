"""Reusing the key/value cache of a shared prompt prefix across single-forward-pass scorings.

A gate scores many prompts that start the same way: the chat template's system turn, "Today is <date>." and the
instruction, about half of a TA-ARE prompt. Their keys and values do not depend on what follows, so the second
prompt onwards only runs the tokens after the longest prefix it shares with the previous prompt. The logits
equal a full forward pass up to float rounding (tested against one).

One entry per model is kept (the last prompt's cache, cropped back to the shared prefix on the next call), so
memory is bounded by one prompt's keys and values; prompts longer than ``max_cached_tokens`` are run without
caching. Calls are serialised by a lock, because a cached entry is mutated in place.

Usage:
    >>> cache = PrefixKVCache()
    >>> logits, reused = cache.next_token_logits(model, [1, 2, 3, 4])  # full pass, remembered
    >>> logits, reused = cache.next_token_logits(model, [1, 2, 3, 9])  # runs one token; reused == 3
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from icr2_components.models.cache_names import forward_cache_keyword, output_cache

logger = logging.getLogger(__name__)


def common_prefix_length(first: Sequence[int], second: Sequence[int]) -> int:
    """How many leading ids the two sequences share."""
    count = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        count += 1
    return count


class LastPromptCache:
    """The last prompt's ids and key/value cache for one model, behind a lock, with the reuse counters: what the
    scoring cache below and the generation cache (``generation_prefix_cache``) both keep."""

    def __init__(self, min_reuse_tokens: int, max_cached_tokens: int) -> None:
        """
        :param min_reuse_tokens: Shorter shared prefixes are not worth a cached call; the prompt runs whole.
        :param max_cached_tokens: Prompts longer than this run without keeping their cache.
        :raises ValueError: a count that is not a positive integer, or ``max_cached_tokens < min_reuse_tokens``.
        """
        if isinstance(min_reuse_tokens, bool) or not isinstance(min_reuse_tokens, int) or min_reuse_tokens < 1:
            raise ValueError(f"min_reuse_tokens must be a positive integer, got {min_reuse_tokens!r}.")
        if (isinstance(max_cached_tokens, bool) or not isinstance(max_cached_tokens, int)
                or max_cached_tokens < min_reuse_tokens):
            raise ValueError(f"max_cached_tokens must be an integer >= min_reuse_tokens, got {max_cached_tokens!r}.")
        self.min_reuse_tokens = min_reuse_tokens
        self.max_cached_tokens = max_cached_tokens
        self._lock = threading.Lock()
        self._model_id: int | None = None
        self._ids: list[int] = []
        self._cache = None
        self._disabled_reason: str | None = None
        self.stats = {"calls": 0, "reused_calls": 0, "reused_tokens": 0, "computed_tokens": 0}

    def clear(self) -> None:
        with self._lock:
            self._model_id, self._ids, self._cache = None, [], None


class PrefixKVCache(LastPromptCache):
    """Keeps the last prompt's key/value cache and reuses its shared prefix for the next prompt."""

    def __init__(self, min_reuse_tokens: int = 16, max_cached_tokens: int = 4096) -> None:
        """
        :param min_reuse_tokens: Shorter shared prefixes are not worth a cached call; the prompt runs whole.
        :param max_cached_tokens: Prompts longer than this are scored without keeping their cache.
        """
        super().__init__(min_reuse_tokens, max_cached_tokens)

    def next_token_logits(self, model, ids: Sequence[int]):
        """Float logits of the token after ``ids`` (a 1-D vocabulary tensor) and how many prompt tokens were reused."""
        import torch

        ids = list(ids)
        if not ids:
            raise ValueError("Cannot score an empty prompt.")
        with self._lock, torch.inference_mode():
            self.stats["calls"] += 1
            shared = 0
            if self._cache is not None and self._model_id == id(model) and self._disabled_reason is None:
                # At least one token must run to produce logits.
                shared = min(common_prefix_length(self._ids, ids), len(ids) - 1)
            if shared >= self.min_reuse_tokens:
                try:
                    excess = self._cache.get_seq_length() - shared
                    if excess > 0:
                        self._cache.crop(-excess)  # transformers 5: a negative count removes that many tokens
                    logits = self._forward(model, ids[shared:], self._cache)
                except (AttributeError, NotImplementedError, TypeError, ValueError) as error:
                    # A cache type that cannot be cropped (e.g. some sliding-window caches): score whole prompts.
                    self._disabled_reason = f"{type(error).__name__}: {error}"
                    logger.warning(
                        "Prefix reuse disabled for this model (%s); prompts run whole.", self._disabled_reason
                    )
                    self._cache, self._ids = None, []
                    return self._forward(model, ids, None, keep=False), 0
                self._ids = ids
                self.stats["reused_calls"] += 1
                self.stats["reused_tokens"] += shared
                self.stats["computed_tokens"] += len(ids) - shared
                return logits, shared
            keep = self._disabled_reason is None and len(ids) <= self.max_cached_tokens
            logits = self._forward(model, ids, None, keep=keep)
            self.stats["computed_tokens"] += len(ids)
            return logits, 0

    def _forward(self, model, ids: list[int], cache, keep: bool = True):
        import torch

        input_ids = torch.tensor([ids], device=model.device)
        kwargs = {forward_cache_keyword(model): cache} if cache is not None else {}
        try:
            output = model(input_ids=input_ids, use_cache=keep or cache is not None, logits_to_keep=1, **kwargs)
        except TypeError:  # models without logits_to_keep
            output = model(input_ids=input_ids, use_cache=keep or cache is not None, **kwargs)
        if cache is None and keep:
            self._model_id, self._ids, self._cache = id(model), ids, output_cache(output)
        elif cache is None:
            self._model_id, self._ids, self._cache = None, [], None
        return output.logits[0, -1].float()
