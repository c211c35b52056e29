"""Reusing the key/value cache of the last prompt's shared prefix when generating the next reply.

Prompts answered one after another often start the same way: Lost in the Middle's gold document moved through the
same distractors (at positions 10 and 15 of 30, the first 9 documents are the same), the same instruction and
corpus before another question, a chat's earlier turns. The keys and values of a shared prefix do not depend on
what follows it, so ``generate`` is given the last prompt's cache, cropped to the prefix both share, and
runs only the rest of the prompt. In float32 greedy replies equal those of the whole prompt (a test compares them
on real prompts; ``bench/prompt_prefix_reuse.py`` counts them and times both); in half precision the rounding of
a shorter forward pass can differ, so a near tie may go the other way.

Running a prompt's rest against a cache is slower per token than running a whole prompt: the attention then needs
an explicit mask instead of the causal kernel (on 2 CPU cores, SmolLM2-135M in fp32 over 3,900-token prompts,
1.1-1.35x the time per computed token, ``bench/prompt_prefix_reuse.py``). So a prefix is reused only when it is at
least ``min_reuse_fraction`` of the prompt (0.25 by default: shorter shares measured slower than no reuse).

One entry is kept (the last prompt's cache without the reply's tokens), so memory is bounded by one prompt's keys
and values; prompts longer than ``max_cached_tokens`` are generated without keeping theirs. Calls are serialised
by a lock. A cache that cannot be cropped (some sliding-window layers) turns reuse off with one warning.

Usage:
    >>> cache = GenerationPrefixCache()
    >>> output, reused = cache.generate(model, input_ids, attention_mask, max_new_tokens=16)  # whole prompt
    >>> output, reused = cache.generate(model, next_ids, next_mask, max_new_tokens=16)  # runs what follows the prefix
"""

from __future__ import annotations

import logging
from typing import Any

from icr2_components.models.cache_names import generate_cache_keyword
from icr2_components.models.prefix_cache import LastPromptCache, common_prefix_length

logger = logging.getLogger(__name__)


class GenerationPrefixCache(LastPromptCache):
    """Keeps the last prompt's key/value cache and generates the next reply from its shared prefix."""

    def __init__(self, min_reuse_tokens: int = 16, min_reuse_fraction: float = 0.25,
                 max_cached_tokens: int = 32768) -> None:
        """
        :param min_reuse_tokens: Shorter shared prefixes are not worth a cached call; the prompt runs whole.
        :param min_reuse_fraction: Nor are shared prefixes below this fraction of the prompt (0 to 1).
        :param max_cached_tokens: Prompts longer than this are generated without keeping their cache.
        :raises ValueError: a count that is not a positive integer, ``max_cached_tokens < min_reuse_tokens``, or a
            fraction outside [0, 1].
        """
        super().__init__(min_reuse_tokens, max_cached_tokens)
        if (isinstance(min_reuse_fraction, bool) or not isinstance(min_reuse_fraction, (int, float))
                or not 0 <= min_reuse_fraction <= 1):
            raise ValueError(f"min_reuse_fraction must be a number from 0 to 1, got {min_reuse_fraction!r}.")
        self.min_reuse_fraction = float(min_reuse_fraction)

    def generate(self, model, input_ids, attention_mask=None, **arguments: Any) -> tuple[Any, int]:
        """``model.generate`` for one prompt (``input_ids`` of shape (1, n), no padding), starting from the last
        prompt's cache where the two share at least ``min_reuse_tokens`` leading tokens and ``min_reuse_fraction``
        of this prompt.

        :returns: ``generate``'s output (the prompt's ids, then the reply's) and how many prompt tokens were reused.
        :raises ValueError: a batch of more than one prompt, or a cache among ``arguments``.
        """
        import torch
        from transformers import DynamicCache

        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"GenerationPrefixCache generates one prompt at a time, got ids of shape "
                             f"{tuple(input_ids.shape)}.")
        if {"cache", "past_key_values"} & set(arguments):
            raise ValueError("GenerationPrefixCache supplies the generation's cache itself.")
        ids = input_ids[0].tolist()
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        with self._lock:
            self.stats["calls"] += 1
            shared = 0
            if self._cache is not None and self._model_id == id(model):
                # at least the prompt's last token runs, to give the first reply token's logits
                shared = min(common_prefix_length(self._ids, ids), len(ids) - 1)
            # the kept cache is taken, not copied: generate extends it in place, and it is kept again (as this
            # prompt's) only once generate returns, so a failed call leaves nothing half-extended behind
            kept, self._model_id, self._ids, self._cache = self._cache, None, [], None
            cache = None
            if shared >= max(self.min_reuse_tokens, self.min_reuse_fraction * len(ids)):
                cache = kept
                excess = cache.get_seq_length() - shared
                if excess > 0:
                    cache.crop(-excess)  # transformers 5: a negative count removes that many tokens
            else:
                shared = 0
                if self._disabled_reason is None and len(ids) <= self.max_cached_tokens:
                    cache = DynamicCache(config=model.config)
            output = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                    **({generate_cache_keyword(): cache} if cache is not None else {}), **arguments)
            self.stats["computed_tokens"] += len(ids) - shared
            if shared:
                self.stats["reused_calls"] += 1
                self.stats["reused_tokens"] += shared
            self._keep(model, ids, cache)
            return output, shared

    def _keep(self, model, ids: list[int], cache) -> None:
        """Remember ``cache`` (the prompt's and the reply's keys and values) cropped to the prompt's."""
        self._model_id, self._ids, self._cache = None, [], None
        if cache is None or len(ids) > self.max_cached_tokens:
            return
        try:
            excess = cache.get_seq_length() - len(ids)
            if excess > 0:
                cache.crop(-excess)
        except (AttributeError, NotImplementedError, RuntimeError, TypeError, ValueError) as error:
            self._disabled_reason = f"{type(error).__name__}: {error}"
            logger.warning("Prompt prefix reuse turned off for this model (%s); prompts run whole.",
                           self._disabled_reason)
            return
        self._model_id, self._ids, self._cache = id(model), ids, cache
