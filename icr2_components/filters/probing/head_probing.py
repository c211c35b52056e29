"""Retrieval-head probing (ICR2 section 4.2, eq. 3 and 4).

For each head h, its top-M passages C_h^M(q) by attention; its hit rate is the mean over validation instances
of |C_h^M(q) ∩ Z*(q)| / |Z*(q)|, with Z*(q) the gold passages present in the context. The Q heads with the
highest hit rates are the retrieval heads.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from haystack import Document

from icr2_components.artifacts.retrieval_heads import RetrievalHeadArtifact
from icr2_components.filters.passage_scoring import encode_cic_prompt, score_passages, top_m_indices
from icr2_components.records import SkipReport

logger = logging.getLogger(__name__)


@dataclass
class CiCInstance:
    """One corpus-in-context instance: documents carry ``meta["passage_id"]``; gold ids name some of them."""

    id: str
    query: str
    documents: list[Document]
    gold_passage_ids: list[str]
    task_type: str = "qa"
    answers: list[str] = field(default_factory=list)


def instance_hit_rates(
    scores: torch.Tensor, passage_ids: Sequence[str], gold_ids: Iterable[str], max_m: int
) -> torch.Tensor:
    """Hit rate of every head for M = 1..max_m on one instance: (max_m, layers, heads).

    ``scores``: (layers, heads, passages). Gold ids not among ``passage_ids`` are ignored; with none present the
    hit rate is undefined and this raises (the caller counts such instances as skipped).
    """
    gold = torch.tensor([pid in set(gold_ids) for pid in passage_ids], dtype=torch.float32)
    if gold.sum() == 0:
        raise ValueError("None of the gold passages is in the context; the hit rate is undefined.")
    order = top_m_indices(scores, max_m)  # (L, H, m')
    hits = gold[order].cumsum(dim=-1) / gold.sum()  # hits within the top 1..m'
    if hits.shape[-1] < max_m:  # fewer passages than max_m: the rest of the rows repeat "all passages kept"
        hits = torch.cat([hits, hits[..., -1:].expand(*hits.shape[:-1], max_m - hits.shape[-1])], dim=-1)
    return hits.permute(2, 0, 1).contiguous()


def select_heads(hit_rates: torch.Tensor, q: int) -> list[tuple[int, int]]:
    """The ``q`` (layer, head) pairs with the highest hit rates (eq. 4), best first; ties by (layer, head)."""
    layers, heads = hit_rates.shape
    if not 1 <= q <= layers * heads:
        raise ValueError(f"Q must be between 1 and {layers * heads} (layers x heads), got {q}.")
    flat = hit_rates.flatten()
    order = torch.sort(flat, descending=True, stable=True).indices[:q]
    return [(int(i) // heads, int(i) % heads) for i in order]


def chance_hit_rate(passage_count: int, gold_count: int, m: int) -> float:
    """Expected hit rate of M passages drawn at random: min(M, N) / N (for any number of gold passages)."""
    return min(m, passage_count) / passage_count


@dataclass
class ProbeResult:
    """Mean hit rates over the probed instances: ``hit_rates[m - 1, layer, head]``."""

    hit_rates: torch.Tensor
    instances: list[str]
    chance: list[float]  # mean chance hit rate for each M
    skips: SkipReport

    def heads(self, m: int, q: int) -> list[tuple[int, int]]:
        return select_heads(self.hit_rates[m - 1], q)


def probe_heads(
    model,
    tokenizer,
    instances: Sequence[CiCInstance],
    max_m: int = 8,
    query_position_mode: str = "last_prompt_token",
    aggregate: str = "sum",
    query_aware: bool = False,
    max_context_tokens: int | None = None,
    generation_tokens: int = 16,
    progress: bool = True,
) -> ProbeResult:
    """Score every head on every instance; instances without gold in context or too long are counted skips."""
    from tqdm.auto import tqdm

    from icr2_components.errors import ContextTooLongError

    if max_m < 1:
        raise ValueError(f"max_m must be >= 1, got {max_m}.")
    skips = SkipReport(source="probe-heads")
    totals: torch.Tensor | None = None
    chance = torch.zeros(max_m)
    used: list[str] = []
    for instance in tqdm(instances, desc="probing heads", disable=not progress):
        present = {str(d.meta.get("passage_id")) for d in instance.documents}
        if not instance.documents:
            skips.skip("no passages", detail=instance.id)
            continue
        if not present & set(instance.gold_passage_ids):
            skips.skip("no gold passage in context", detail=instance.id)
            continue
        encoded = encode_cic_prompt(tokenizer, instance.task_type, instance.query, instance.documents, query_aware)
        try:
            scored = score_passages(
                model, tokenizer, encoded, query_position_mode, aggregate,
                max_context_tokens=max_context_tokens, generation_tokens=generation_tokens,
            )
        except ContextTooLongError as error:
            skips.skip("context too long", detail=f"{instance.id}: {error}")
            continue
        rates = instance_hit_rates(scored.scores, scored.passage_ids, instance.gold_passage_ids, max_m)
        totals = rates if totals is None else totals + rates
        n = len(scored.passage_ids)
        chance += torch.tensor([chance_hit_rate(n, 0, m) for m in range(1, max_m + 1)])
        used.append(instance.id)
    if totals is None:
        raise ValueError(f"No instance could be probed ({skips.summary()}); check the benchmark file.")
    if skips.total:
        logger.warning(skips.summary())
    return ProbeResult(totals / len(used), used, (chance / len(used)).tolist(), skips)


def split_instances(instances: Sequence[CiCInstance], probe_count: int, seed: int = 0) -> tuple[list, list]:
    """A seeded random split: ``probe_count`` instances to select heads on, the rest held apart."""
    shuffled = list(instances)
    random.Random(seed).shuffle(shuffled)
    return shuffled[:probe_count], shuffled[probe_count:]


def artifact_from_probe(
    result: ProbeResult,
    model: str,
    signature: dict[str, Any],
    m: int,
    q: int,
    task_type: str = "qa",
    query_aware: bool = False,
    query_position_mode: str = "last_prompt_token",
    aggregate: str = "sum",
    rank: int = 32,
    generation_tokens: int = 6,
) -> RetrievalHeadArtifact:
    """Select the top ``q`` heads at ``m`` from a :class:`ProbeResult` and record how they were found."""
    if not 1 <= m <= result.hit_rates.shape[0]:
        raise ValueError(f"M={m} was not probed (probed M = 1..{result.hit_rates.shape[0]}); raise --max-m.")
    ranking = select_heads(result.hit_rates[m - 1], max(q, min(rank, result.hit_rates[0].numel())))
    return RetrievalHeadArtifact(
        model=model,
        model_signature=signature,
        task_type=task_type,
        query_aware=query_aware,
        query_position_mode=query_position_mode,
        aggregate=aggregate,
        m=m,
        q=q,
        heads=[list(h) for h in ranking[:q]],
        ranking=[list(h) for h in ranking],
        hit_rates=[[[round(float(v), 6) for v in row] for row in layer] for layer in result.hit_rates.tolist()],
        chance_hit_rates=[round(c, 6) for c in result.chance],
        instances=len(result.instances),
        skipped=result.skips.as_dict(),
        generation_tokens=generation_tokens,
        probed_ids=list(result.instances),  # icr2 compare keeps these questions out of its evaluation
    )
