"""ConfounderAwareCorpusBuilder: ICR2's corpus-in-context, gold passages hidden among retrieved confounders."""

from __future__ import annotations

from typing import Any, ClassVar

from haystack import Document, component

from icr2_components.builders.corpus_assembly import (
    ORIGIN_GOLD,
    RESERVED_ORIGINS,
    CorpusAssembler,
    validate_budget,
    validate_ratio,
)
from icr2_components.models.token_counting import PassageTokenCounter
from icr2_components.parameters import boolean, document_list

_FIXED_INPUTS = {
    "query", "answers", "gold_documents", "provenance", "random_documents", "candidates",
    "confounding_ratio", "budget_tokens", "budget_passages", "seed", "shuffle",
}


def _check_seed(seed: Any) -> None:
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}.")


@component
class ConfounderAwareCorpusBuilder:
    """
    Builds a corpus-in-context (ICR2, sections 3.1-3.2): pooled retriever confounders, random filling at a
    confounding ratio p, and in benchmark mode the gold passages, to a budget in reader tokens or passages.

    Candidates arrive as ranked lists, one per retriever: either on the sockets named by `retrievers`
    (connect `bm25_retriever.documents -> builder.bm25`) or as one `candidates` dict `{name: [Document]}`.
    Lists are pooled top to bottom across retrievers in turn. A candidate is dropped (and counted in `report`)
    when it has no text, repeats an earlier candidate, overlaps a gold provenance span (KILT meta
    `wikipedia_id`, `start_paragraph_id`, ...), contains a normalised answer, or nearly duplicates a kept
    passage. Retriever and random confounders alternate so that exactly round(p * n) of n confounders come from
    the retrievers. Filling is next-fit: it stops at the first candidate that does not fit the budget.

    Benchmark mode (`gold_documents` given): every gold passage is kept (a budget too small for them is an
    error). Production mode: the same pooling, checks and budget, no gold. The result is shuffled with a seed
    (derived from `seed` and the query) unless `shuffle=False`, which keeps gold first and then pooled order.
    Each output document is a copy carrying meta `passage_id` ("PSG001"... in output order), `origin`
    ("gold", the retriever's name or "random") and `rank` (1-based rank in the list it came from).

    Paper: ICR2, Qiu et al. 2025, "Eliciting In-context Retrieval and Reasoning for Long-context Large Language Models":
    https://arxiv.org/abs/2501.08248

    Usage example:
    ```python
    from icr2_components.builders import ConfounderAwareCorpusBuilder

    builder = ConfounderAwareCorpusBuilder(
        retrievers=["bm25", "dense"], budget_tokens=4000, tokenizer="smollm2-135m-instruct", confounding_ratio=0.5
    )
    result = builder.run(
        query="where are the giant redwoods located in california",
        answers=["Humboldt County"],
        gold_documents=gold_passages,
        bm25=bm25_documents,
        dense=dense_documents,
        random_documents=random_passages,
    )
    result["documents"][0].meta  # {..., "passage_id": "PSG001", "origin": "bm25", "rank": 3}
    result["report"]             # counts of everything dropped, the budget used, the achieved ratio
    ```
    """

    backend_role: ClassVar[str] = "token_budget"
    """Under a backend (`icr2_components.backends`), a token budget counts with that backend model's tokenizer."""

    def __init__(
        self,
        retrievers: list[str] | None = None,
        confounding_ratio: float = 1.0,
        budget_tokens: int | None = None,
        budget_passages: int | None = None,
        tokenizer: str | None = None,
        seed: int = 0,
        shuffle: bool = True,
        drop_near_duplicates: bool = True,
        near_duplicate_threshold: float = 0.8,
        strict_ratio: bool = True,
    ) -> None:
        """
        :param retrievers: names of the ranked-list input sockets, in pooling order (e.g. `["bm25", "dense"]`).
        :param confounding_ratio: p in [0, 1]; the share of confounders chosen by retrievers (0: LOFT-style
            random filling, 1: all retriever-selected).
        :param budget_tokens: the corpus size in tokens of `tokenizer` (each passage costs its rendered block).
        :param budget_passages: the corpus size in passages, gold included.
        :param tokenizer: the reader's tokenizer (bundled alias, local path or HF id); needed for `budget_tokens`.
        :param seed: seeds the random pool's order and the shuffle (together with the query).
        :param shuffle: shuffle the corpus (ICR2); False keeps gold first, then pooled order.
        :param drop_near_duplicates: drop candidates whose 5-gram Jaccard similarity to a kept passage
            reaches `near_duplicate_threshold`.
        :param strict_ratio: stop filling when the source a slot needs is exhausted (keeps p exact); False
            fills from the other source and reports the achieved ratio.
        """
        retrievers = list(retrievers or [])
        for name in retrievers:
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"Retriever names become input sockets and must be identifiers, got {name!r}.")
            if name in _FIXED_INPUTS or name in RESERVED_ORIGINS:
                raise ValueError(f"Retriever name {name!r} is reserved; choose another (e.g. '{name}_retriever').")
        if len(set(retrievers)) != len(retrievers):
            raise ValueError(f"Retriever names repeat: {retrievers}.")
        validate_ratio(confounding_ratio)
        validate_budget(budget_tokens, budget_passages)
        if budget_tokens is not None and not tokenizer:
            raise ValueError(
                "budget_tokens is counted in the reader's tokens: set tokenizer (e.g. 'smollm2-135m-instruct')."
            )
        if not isinstance(near_duplicate_threshold, (int, float)) or isinstance(near_duplicate_threshold, bool) or (
                not 0.0 < near_duplicate_threshold <= 1.0):
            raise ValueError(f"near_duplicate_threshold must be in (0, 1], got {near_duplicate_threshold!r}.")
        _check_seed(seed)
        for flag in ("shuffle", "drop_near_duplicates", "strict_ratio"):
            boolean(locals()[flag], flag)
        self.retrievers = retrievers
        self.confounding_ratio = float(confounding_ratio)
        self.budget_tokens = budget_tokens
        self.budget_passages = budget_passages
        self.tokenizer = tokenizer
        self.seed = seed
        self.shuffle = shuffle
        self.drop_near_duplicates = drop_near_duplicates
        self.near_duplicate_threshold = near_duplicate_threshold
        self.strict_ratio = strict_ratio
        self._counter: PassageTokenCounter | None = None
        self._assembler: CorpusAssembler | None = None
        for name in retrievers:
            component.set_input_type(self, name, list[Document], default=None)

    def warm_up(self) -> None:
        if self._assembler is None:
            if self.tokenizer:
                self._counter = PassageTokenCounter.for_model(self.tokenizer)
            self._assembler = CorpusAssembler(
                count_tokens=self._counter.count_many if self._counter else None,
                drop_near_duplicates=self.drop_near_duplicates,
                near_duplicate_threshold=self.near_duplicate_threshold,
            )

    @staticmethod
    def trace_record(outputs: dict[str, Any]) -> dict[str, Any] | None:
        """What the builder did for one question, read from its outputs (compare records it with the answer:
        ``pipeline_spec``): the budget and what it used, the ids of its confounders and gold passages in prompt
        order, why filling stopped.

        :returns: the trace, or None when the outputs hold no report.
        """
        report = outputs.get("report")
        if not isinstance(report, dict):
            return None
        documents = outputs.get("documents") or []
        return {"technique": "corpus_builder", "budget": report.get("budget"), "used": report.get("used"),
                "budget_unit": report.get("budget_unit"), "stop_reason": report.get("stop_reason"),
                "achieved_ratio": report.get("achieved_ratio"),
                "confounder_ids": [d.id for d in documents if (d.meta or {}).get("origin") != ORIGIN_GOLD],
                "gold_ids": [d.id for d in documents if (d.meta or {}).get("origin") == ORIGIN_GOLD]}

    @component.output_types(documents=list[Document], report=dict)
    def run(
        self,
        query: str,
        answers: list[str] | None = None,
        gold_documents: list[Document] | None = None,
        provenance: list[dict] | None = None,
        random_documents: list[Document] | None = None,
        candidates: dict[str, list[Document]] | None = None,
        confounding_ratio: float | None = None,
        budget_tokens: int | None = None,
        budget_passages: int | None = None,
        seed: int | None = None,
        shuffle: bool | None = None,
        **ranked_lists: list[Document] | None,
    ) -> dict[str, Any]:
        """
        :param query: the query (used only to derive the per-query seed; retrieval happened upstream).
        :param answers: answer strings; candidates containing one (normalised) are dropped.
        :param gold_documents: the gold passages (benchmark mode); all are kept.
        :param provenance: KILT provenance dicts whose spans no confounder may overlap (in addition to the
            spans of `gold_documents`).
        :param random_documents: the pool random confounders are drawn from (needed when p < 1).
        :param candidates: ranked lists by retriever name, pooled after the socket lists, in dict order.
        :param ranked_lists: the ranked lists on the sockets named in `retrievers`.
        The remaining parameters override the init values for this call; a budget given here replaces both
        init budgets (pass budget_tokens and budget_passages together to keep both limits).
        :returns: `documents` (the corpus) and `report` (counts, budget used, achieved ratio, stop reason).
        """
        unknown = sorted(set(ranked_lists) - set(self.retrievers))
        if unknown:
            raise ValueError(f"Unknown inputs {unknown}; the retriever sockets are {self.retrievers}.")
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"ConfounderAwareCorpusBuilder.run needs a non-empty query, got {query!r}.")
        document_list(gold_documents, "gold_documents", optional=True)
        document_list(random_documents, "random_documents", optional=True)
        for name in self.retrievers:
            document_list(ranked_lists.get(name), name, optional=True)
        if candidates is not None and not isinstance(candidates, dict):
            raise ValueError(f"candidates must map retriever names to lists of Documents, got {candidates!r:.80}.")
        for name, docs in (candidates or {}).items():
            document_list(docs, f"candidates[{name!r}]", optional=True)
        if seed is not None:
            _check_seed(seed)
        boolean(shuffle, "shuffle", optional=True)
        lists: dict[str, list[Document]] = {name: list(ranked_lists.get(name) or []) for name in self.retrievers}
        for name, docs in (candidates or {}).items():
            if name in lists:
                raise ValueError(f"Retriever {name!r} was given both on its socket and in candidates.")
            lists[name] = list(docs or [])
        token_budget = budget_tokens if budget_tokens is not None else self.budget_tokens
        passage_budget = budget_passages if budget_passages is not None else self.budget_passages
        if budget_tokens is not None or budget_passages is not None:
            # An override of one unit replaces the init budget of the other unit, unless both are given.
            token_budget, passage_budget = budget_tokens, budget_passages
        if token_budget is not None and not self.tokenizer:
            raise ValueError("budget_tokens needs the builder's tokenizer; set tokenizer in __init__.")
        self.warm_up()
        assert self._assembler is not None  # warm_up builds it
        result = self._assembler.assemble(
            query,
            lists,
            answers=answers,
            gold_documents=gold_documents,
            provenance=provenance,
            random_documents=random_documents,
            confounding_ratio=self.confounding_ratio if confounding_ratio is None else confounding_ratio,
            budget_tokens=token_budget,
            budget_passages=passage_budget,
            seed=self.seed if seed is None else seed,
            shuffle=self.shuffle if shuffle is None else shuffle,
            strict_ratio=self.strict_ratio,
        )
        return {"documents": result.documents, "report": result.report.as_dict()}
