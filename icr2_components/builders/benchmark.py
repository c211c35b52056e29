"""ICR2 benchmark construction (section 3.2): KILT tasks + retrievers -> corpus-in-context JSONL.

The reader of the files it writes is ground floor (:mod:`icr2_components.kilt.icr2_benchmark`): evaluation
and training read benchmark files without depending on the builder.

Each KILT instance <q, a, P+> becomes an ICR2 instance <q, a, C>. Retrievers run on ``q`` concatenated with
the answers (as in ICR2, so that confounders are close to both), their top-K lists are pooled, gold-overlapping
and answer-bearing passages are excluded, random passages fill the share 1 - p, and C is cut to the budget
and shuffled (see :mod:`icr2_components.builders.corpus_assembly`). A record::

    {"id", "query", "answers", "task_type", "context": [{"passage_id", "doc_id", "title", "text", "origin"}],
     "gold_passage_ids": ["PSG017"], "gold_doc_ids": [...], "budget": {"unit": "tokens", "value": 6000},
     "confounding_ratio": 0.5, "provenance": [...], "prompt_tokens": 5230, "report": {...}}

Instances that cannot be built are counted in a :class:`SkipReport`, never dropped silently.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from haystack import Document

from icr2_components.builders.corpus_assembly import (
    BudgetTooSmallError,
    CorpusAssembler,
    validate_budget,
    validate_ratio,
)
from icr2_components.kilt.icr2_benchmark import record_documents
from icr2_components.kilt.tasks import KiltTask
from icr2_components.models.token_counting import PassageTokenCounter
from icr2_components.records import SkipReport
from icr2_components.text.templates import TASK_TYPES, render_cic_prompt

RetrieveFn = Callable[[str, int], list[Document]]
RandomPoolFn = Callable[[int, int, set], list[Document]]


def task_seed(seed: int, task_id: str) -> int:
    """A per-instance seed: stable across runs and processes (crc32, not Python's salted hash)."""
    return zlib.crc32(f"{seed}:{task_id}".encode())


@dataclass
class BenchmarkSummary:
    """What a build wrote: the path, the Table 7 statistics, the skips, the per-instance reports aggregated."""

    path: str
    written: int
    statistics: dict[str, Any]
    skips: dict[str, Any]
    dropped: dict[str, int] = field(default_factory=dict)
    stop_reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _random_pool_fn(random_pool: RandomPoolFn | Sequence[Document] | None) -> RandomPoolFn | None:
    if random_pool is None or callable(random_pool):
        return random_pool
    pool = list(random_pool)

    def sample(n: int, seed: int, exclude: set) -> list[Document]:
        import random

        candidates = [d for d in pool if d.id not in exclude]
        return random.Random(seed).sample(candidates, min(n, len(candidates)))

    return sample


def record_from_corpus(
    task: KiltTask, task_type: str, documents: list[Document], budget_unit: str, budget: int, ratio: float
) -> dict[str, Any]:
    context = [
        {
            "passage_id": d.meta["passage_id"],
            "doc_id": d.id,
            "title": str(d.meta.get("title", "")),
            "text": d.content,
            "origin": d.meta["origin"],
        }
        for d in documents
    ]
    gold = [d for d in documents if d.meta["origin"] == "gold"]
    return {
        "id": task.id,
        "query": task.input,
        "answers": list(task.answers),
        "task_type": task_type,
        "context": context,
        "gold_passage_ids": [d.meta["passage_id"] for d in gold],
        "gold_doc_ids": [d.id for d in gold],
        "budget": {"unit": budget_unit, "value": budget},
        "confounding_ratio": ratio,
        "provenance": [asdict(p) for p in task.provenance],
    }


def build_icr2_benchmark(
    tasks: Iterable[KiltTask],
    retrieve: Mapping[str, RetrieveFn],
    random_pool: RandomPoolFn | Sequence[Document] | None,
    gold_passages: Callable[[KiltTask], list[Document]],
    out_path: str | os.PathLike,
    *,
    task_type: str = "qa",
    budget_tokens: int | None = None,
    budget_passages: int | None = None,
    confounding_ratio: float = 1.0,
    seed: int = 0,
    top_k: int = 200,
    tokenizer: str | None = "smollm2-135m-instruct",
    query_with_answer: bool = True,
    random_pool_size: int | None = None,
    progress: bool = True,
) -> BenchmarkSummary:
    """Write one ICR2 record per task to ``out_path`` (JSONL) and return the Table 7 statistics.

    :param retrieve: retriever name -> ``fn(query, top_k)`` returning ranked passages, pooled in this order.
    :param random_pool: ``fn(n, seed, exclude_ids)`` (e.g. ``IndexHandle.random_documents``) or a list of
        passages to sample from; needed when ``confounding_ratio < 1``.
    :param gold_passages: ``fn(task)`` giving the gold passages (e.g. a
        :class:`~icr2_components.kilt.icr2_benchmark.GoldPassageLookup`).
    :param tokenizer: the reader's tokenizer: counts ``budget_tokens`` and the prompt tokens of Table 7.
    :param query_with_answer: retrieve with ``query + answers`` (ICR2) rather than the query alone.
    """
    if task_type not in TASK_TYPES:
        raise ValueError(f"Unknown task_type {task_type!r}; choose one of {list(TASK_TYPES)}.")
    ratio = validate_ratio(confounding_ratio)
    validate_budget(budget_tokens, budget_passages)
    if not retrieve:
        raise ValueError("Give at least one retriever (name -> fn(query, top_k)).")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}.")
    if budget_tokens is not None and not tokenizer:
        raise ValueError("budget_tokens needs the reader's tokenizer.")
    sampler = _random_pool_fn(random_pool)
    if ratio < 1.0 and sampler is None:
        raise ValueError(f"confounding_ratio={ratio} needs a random pool (random_pool=handle.random_documents).")
    counter = PassageTokenCounter.for_model(tokenizer) if tokenizer else None
    assembler = CorpusAssembler(count_tokens=counter.count_many if counter else None)
    if budget_tokens is not None:
        budget_unit, budget_value = "tokens", budget_tokens
    else:
        assert budget_passages is not None  # validate_budget refuses neither
        budget_unit, budget_value = "passages", budget_passages
    if random_pool_size is None:
        # enough random passages for the whole budget even if every slot were random (passages cost >= ~64 tokens)
        random_pool_size = budget_passages if budget_passages is not None else budget_value // 64 + 8

    skips = SkipReport(source="build-benchmark")
    dropped: dict[str, int] = {}
    stop_reasons: dict[str, int] = {}
    records_stats: list[dict[str, Any]] = []
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = out_path.with_suffix(out_path.suffix + ".tmp")
    written = 0
    from tqdm.auto import tqdm

    with open(tmp_path, "w", encoding="utf-8") as handle:
        for task in tqdm(tasks, desc="building ICR2 instances", unit=" queries", disable=not progress):
            if not task.answers and task_type != "dialogue":
                skips.skip("no answer", detail=task.id)
                continue
            gold = gold_passages(task)
            if not gold:
                skips.skip("no gold passage in the corpus", detail=task.id)
                continue
            query = task.input + (" " + " ".join(task.answers) if query_with_answer and task.answers else "")
            lists = {name: fn(query, top_k) for name, fn in retrieve.items()}
            instance_seed = task_seed(seed, task.id)
            randoms: list[Document] = []
            if ratio < 1.0 and sampler is not None:  # a sampler is required below 1 (checked above)
                randoms = sampler(random_pool_size, instance_seed, {d.id for d in gold})
            try:
                result = assembler.assemble(
                    task.input,
                    lists,
                    answers=task.answers,
                    gold_documents=gold,
                    provenance=task.provenance,
                    random_documents=randoms,
                    confounding_ratio=ratio,
                    budget_tokens=budget_tokens,
                    budget_passages=budget_passages,
                    seed=instance_seed,
                )
            except BudgetTooSmallError as error:
                skips.skip("gold passages exceed the budget", detail=f"{task.id}: {error}")
                continue
            record = record_from_corpus(task, task_type, result.documents, budget_unit, budget_value, ratio)
            if counter is not None:
                rendered = render_cic_prompt(task_type, task.input, result.documents, tokenizer=counter.tokenizer)
                record["prompt_tokens"] = counter.count_text(rendered.text)
            report = result.report.as_dict()
            record["report"] = report
            for reason, count in report["dropped"].items():
                dropped[reason] = dropped.get(reason, 0) + count
            stop_reasons[report["stop_reason"]] = stop_reasons.get(report["stop_reason"], 0) + 1
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            records_stats.append(record)
            written += 1
    os.replace(tmp_path, out_path)
    statistics = benchmark_statistics(records_stats)
    return BenchmarkSummary(str(out_path), written, statistics, skips.as_dict(), dropped, stop_reasons)


def benchmark_statistics(records: Iterable[Mapping[str, Any]], tokenizer: Any = None) -> dict[str, Any]:
    """ICR2 Table 7: mean passages per query (#CTX), mean CiC prompt tokens (#Tokens), mean gold passages (#Prov).

    ``prompt_tokens`` is read from the records; records without it are rendered with ``tokenizer`` (a loaded
    Hugging Face tokenizer) when one is given, and otherwise left out of the #Tokens mean (``tokens_counted``
    says over how many records it was taken).
    """
    queries = passages = provenance = 0
    tokens: list[int] = []
    for record in records:
        queries += 1
        passages += len(record["context"])
        provenance += len(record["gold_passage_ids"])
        if record.get("prompt_tokens") is not None:
            tokens.append(int(record["prompt_tokens"]))
        elif tokenizer is not None:
            rendered = render_cic_prompt(
                record["task_type"], record["query"], record_documents(record), tokenizer=tokenizer
            )
            tokens.append(len(tokenizer(rendered.text, add_special_tokens=False)["input_ids"]))
    return {
        "queries": queries,
        "ctx": passages / queries if queries else 0.0,
        "tokens": sum(tokens) / len(tokens) if tokens else None,
        "tokens_counted": len(tokens),
        "prov": provenance / queries if queries else 0.0,
    }


__all__ = ["BenchmarkSummary", "benchmark_statistics", "build_icr2_benchmark"]
