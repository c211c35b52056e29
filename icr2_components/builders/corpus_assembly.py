"""The logic of the confounder-aware corpus builder, free of Haystack plumbing (the component wraps it).

ICR2 (section 3.2) builds a contextual corpus C = [P+; P-]: the gold provenance P+ and confounders P- pooled
from several retrievers "from top to bottom", excluding passages that overlap P+ or contain the answer, mixed
with randomly sampled passages at a confounding ratio p (section 3.1), cut to the context size and shuffled.

Conventions (each is tested):

- Pooling: rank 1 of every retriever (in the order the lists are given), then rank 2, ... A passage found by
  several retrievers is kept once, under the retriever that ranked it first in pooled order.
- Ratio: the k-th confounder taken comes from the retrievers iff ``round(p*k) > round(p*(k-1))`` (halves
  round up), so after n confounders exactly ``round(p*n)`` are retriever-selected, whatever n the budget
  allows. When the source a slot needs runs dry, filling stops (``strict_ratio=True``, the ratio holds) or
  the other source fills the rest (``strict_ratio=False``; the achieved ratio is reported).
- Budget: next-fit. Candidates are taken in order while they fit; the first one that does not fit ends the
  filling, so the unused budget is smaller than that passage's cost ("filled to within one passage") and the
  confounders keep their pooled order (first-fit would favour short passages).
- Seed: the random pool's order and the final shuffle derive from ``(seed, query)``, so one seed gives one
  context per query, and different queries do not share one permutation (which would put every gold passage
  at the same position).
- Duplicate ids: the same id with the same text is one passage found twice (kept once, counted); the same id
  with different text is an error.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from haystack import Document

from icr2_components.builders.near_duplicates import NearDuplicateIndex, shingle_prefix, word_shingles
from icr2_components.kilt.chunking import spans_overlap
from icr2_components.kilt.tasks import Provenance
from icr2_components.parameters import positive_int

# the builder's own, looser normalisation (punctuation to spaces, accents folded) for answer-string exclusion;
# replies are scored with the official one (text.normalization.normalize_answer)
from icr2_components.text.normalization import contains_any, normalize_text, normalized_answers
from icr2_components.text.templates import format_passage_id

ORIGIN_GOLD = "gold"
ORIGIN_RANDOM = "random"
RESERVED_ORIGINS = (ORIGIN_GOLD, ORIGIN_RANDOM)

Span = tuple[tuple[int, int], tuple[int, int]]
TokenCounter = Callable[[list[Document]], list[int]]


class BudgetTooSmallError(ValueError):
    """The gold passages alone exceed the budget (benchmark mode keeps every gold passage)."""


def round_half_up(value: float) -> int:
    return int(value + 0.5 + 1e-9)


def retriever_slot(confounding_ratio: float, k: int) -> bool:
    """Whether the k-th (1-based) confounder comes from the retrievers at ratio p."""
    return round_half_up(confounding_ratio * k) > round_half_up(confounding_ratio * (k - 1))


def pool_round_robin(ranked_lists: Mapping[str, Sequence[Document]]) -> Iterator[tuple[str, int, Document]]:
    """``(retriever, rank, document)`` from top to bottom across retrievers in turn (ranks start at 1)."""
    lists = [(name, docs) for name, docs in ranked_lists.items()]
    depth = max((len(docs) for _, docs in lists), default=0)
    for index in range(depth):
        for name, docs in lists:
            if index < len(docs):
                yield name, index + 1, docs[index]


def document_span(document: Document) -> tuple[str, Span] | None:
    """``(wikipedia_id, ((start_par, start_char), (end_par, end_char)))`` from KILT meta, or None."""
    meta = document.meta or {}
    try:
        return str(meta["wikipedia_id"]), (
            (int(meta["start_paragraph_id"]), int(meta["start_character"])),
            (int(meta["end_paragraph_id"]), int(meta["end_character"])),
        )
    except (KeyError, TypeError, ValueError):
        return None


def provenance_span(item: Provenance | Mapping) -> tuple[str, Span]:
    provenance = item if isinstance(item, Provenance) else Provenance.from_dict(dict(item))
    return provenance.wikipedia_id, provenance.span()


@dataclass(frozen=True)
class PassageFeatures:
    """What the checks need to know about a passage, computed once per distinct text."""

    # exact repeats are found by the normalised text itself: a set of strings compares exactly, str caches its hash
    normalized: str
    shingles: frozenset
    prefix: tuple


@dataclass
class CorpusReport:
    """What happened to every candidate: nothing is dropped without being counted here."""

    mode: str = "production"
    budget_unit: str = "passages"
    budget: int = 0
    used: int = 0
    gold: int = 0
    retriever_selected: int = 0
    random_selected: int = 0
    confounding_ratio: float = 1.0
    achieved_ratio: float | None = None
    stop_reason: str = ""
    next_candidate_cost: int | None = None
    candidates_offered: int = 0
    candidates_seen: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    per_retriever: dict[str, int] = field(default_factory=dict)
    candidates_without_span: int = 0

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def as_dict(self) -> dict:
        return {
            "mode": self.mode,
            "budget_unit": self.budget_unit,
            "budget": self.budget,
            "used": self.used,
            "passages": self.gold + self.retriever_selected + self.random_selected,
            "gold": self.gold,
            "retriever_selected": self.retriever_selected,
            "random_selected": self.random_selected,
            "confounding_ratio": self.confounding_ratio,
            "achieved_ratio": self.achieved_ratio,
            "stop_reason": self.stop_reason,
            "next_candidate_cost": self.next_candidate_cost,
            "candidates_offered": self.candidates_offered,
            "candidates_seen": self.candidates_seen,
            "dropped": dict(sorted(self.dropped.items())),
            "per_retriever": dict(self.per_retriever),
            "candidates_without_span": self.candidates_without_span,
        }


@dataclass
class CorpusResult:
    documents: list[Document]
    report: CorpusReport


def validate_ratio(confounding_ratio: float) -> float:
    try:
        if isinstance(confounding_ratio, (str, bool)):
            raise TypeError(confounding_ratio)
        value = float(confounding_ratio)
    except (TypeError, ValueError):
        raise ValueError(f"confounding_ratio must be a number in [0, 1], got {confounding_ratio!r}.") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(
            f"confounding_ratio must be in [0, 1] (0: random filling as in LOFT, 1: all retriever-selected), "
            f"got {confounding_ratio}."
        )
    return value


def validate_budget(budget_tokens: int | None, budget_passages: int | None) -> None:
    if budget_tokens is None and budget_passages is None:
        raise ValueError("Set budget_tokens (reader tokens for the corpus) or budget_passages (a passage count).")
    positive_int(budget_tokens, "budget_tokens", optional=True)
    positive_int(budget_passages, "budget_passages", optional=True)


class CorpusAssembler:
    """Builds one corpus per call; caches per-passage features across calls (bounded)."""

    def __init__(
        self,
        count_tokens: TokenCounter | None = None,
        drop_near_duplicates: bool = True,
        near_duplicate_threshold: float = 0.8,
        max_cache_entries: int = 200_000,
    ) -> None:
        self.count_tokens = count_tokens
        self.drop_near_duplicates = drop_near_duplicates
        self.near_duplicate_threshold = near_duplicate_threshold
        NearDuplicateIndex(near_duplicate_threshold)  # validates the threshold
        self.max_cache_entries = max_cache_entries
        self._features: dict[str, PassageFeatures] = {}

    def features(self, text: str) -> PassageFeatures:
        cached = self._features.get(text)
        if cached is None:
            normalized = normalize_text(text)
            shingles = word_shingles(normalized)
            cached = PassageFeatures(
                normalized, shingles, shingle_prefix(shingles, self.near_duplicate_threshold)
            )
            if len(self._features) >= self.max_cache_entries:
                self._features.clear()
            self._features[text] = cached
        return cached

    def assemble(
        self,
        query: str,
        ranked_lists: Mapping[str, Sequence[Document]],
        *,
        answers: Sequence[str] | None = None,
        gold_documents: Sequence[Document] | None = None,
        provenance: Sequence[Provenance | Mapping] | None = None,
        random_documents: Sequence[Document] | None = None,
        confounding_ratio: float = 1.0,
        budget_tokens: int | None = None,
        budget_passages: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        strict_ratio: bool = True,
    ) -> CorpusResult:
        ratio = validate_ratio(confounding_ratio)
        validate_budget(budget_tokens, budget_passages)
        if budget_tokens is not None and self.count_tokens is None:
            raise ValueError("budget_tokens needs a tokenizer to count with; name the reader's tokenizer.")
        for name in ranked_lists:
            if name in RESERVED_ORIGINS:
                raise ValueError(f"A retriever may not be named {name!r}: it is reserved for passage origins.")
        gold_documents = list(gold_documents or [])
        random_documents = list(random_documents or [])
        benchmark = bool(gold_documents)
        report = CorpusReport(
            mode="benchmark" if benchmark else "production",
            budget_unit="tokens" if budget_tokens is not None else "passages",
            budget=budget_tokens if budget_tokens is not None else int(budget_passages or 0),
            confounding_ratio=ratio,
        )
        if ratio < 1.0 and not random_documents:
            raise ValueError(
                f"confounding_ratio={ratio} asks for randomly sampled passages but random_documents is empty; "
                "pass a random pool (e.g. handle.random_documents(n, seed, exclude_ids)) or set confounding_ratio=1."
            )
        if not any(ranked_lists.values()) and not gold_documents and not random_documents:
            raise ValueError(
                "No candidates: every retriever list is empty and there are no gold or random passages. "
                "Check the retrievers (an empty index?) before building a corpus."
            )

        answer_norms = normalized_answers(list(answers or []))
        excluded_spans: dict[str, list[Span]] = {}
        for item in provenance or []:
            wid, span = provenance_span(item)
            excluded_spans.setdefault(wid, []).append(span)

        taken: list[tuple[Document, str, int]] = []  # (document, origin, rank)
        seen: dict[str, str] = {}  # id -> text of every candidate looked at
        accepted_texts: set[str] = set()
        near_index = NearDuplicateIndex(self.near_duplicate_threshold)
        used_tokens = 0

        # --- gold passages: all of them, always ---
        gold_unique: list[Document] = []
        for document in gold_documents:
            if not document.content or not document.content.strip():
                raise ValueError(f"Gold passage {document.id} has no text; a gold passage must carry its text.")
            features = self.features(document.content)
            if document.id in seen:
                if self.features(seen[document.id]).normalized != features.normalized:
                    raise ValueError(f"Two different gold passages share the id {document.id!r}; ids must be unique.")
                report.drop("duplicate gold")
                continue
            seen[document.id] = document.content
            gold_unique.append(document)
        if gold_unique:
            costs = self.count_tokens(gold_unique) if budget_tokens is not None else [1] * len(gold_unique)
            gold_cost = sum(costs)
            if budget_tokens is not None and gold_cost > budget_tokens:
                raise BudgetTooSmallError(
                    f"The {len(gold_unique)} gold passage(s) need {gold_cost} tokens but "
                    f"budget_tokens={budget_tokens}; "
                    "raise the budget (every gold passage is always included in benchmark mode)."
                )
            if budget_passages is not None and len(gold_unique) > budget_passages:
                raise BudgetTooSmallError(
                    f"There are {len(gold_unique)} gold passages but budget_passages={budget_passages}; raise the "
                    "budget."
                )
            used_tokens += gold_cost if budget_tokens is not None else 0
            for rank, document in enumerate(gold_unique, start=1):
                taken.append((document, ORIGIN_GOLD, rank))
                features = self.features(document.content)
                accepted_texts.add(features.normalized)
                if self.drop_near_duplicates:
                    near_index.add(document.id, features.shingles, features.prefix)
                span = document_span(document)
                if span is not None:
                    excluded_spans.setdefault(span[0], []).append(span[1])
        report.gold = len(gold_unique)
        gold_ids = {document.id for document in gold_unique}
        report.candidates_offered = sum(len(docs) for docs in ranked_lists.values()) + len(random_documents)

        def eligible(document: Document) -> bool:
            """Apply every check to one candidate; count the reason when it is dropped."""
            report.candidates_seen += 1
            content = document.content
            if not content or content.isspace():
                report.drop("no text")
                return False
            # the id check first: most visits are the same passage arriving from another retriever's list
            previous = seen.get(document.id)
            if previous is not None:
                if document.id in gold_ids:
                    report.drop("is a gold passage")
                    return False
                if previous is not content and self.features(previous).normalized != self.features(content).normalized:
                    raise ValueError(
                        f"Two different candidate passages share the id {document.id!r}; ids must identify one "
                        "text (re-index, or give the retrievers' documents distinct ids)."
                    )
                report.drop("same passage from another list")
                return False
            seen[document.id] = content
            features = self.features(content)
            span = document_span(document)
            if span is None:
                report.candidates_without_span += 1
            else:
                for gold_start, gold_end in excluded_spans.get(span[0], ()):
                    if spans_overlap(span[1][0], span[1][1], gold_start, gold_end):
                        report.drop("overlaps gold provenance")
                        return False
            if answer_norms and contains_any(features.normalized, answer_norms):
                report.drop("contains an answer")
                return False
            if features.normalized in accepted_texts:
                report.drop("duplicate text")
                return False
            if self.drop_near_duplicates and near_index.find(features.shingles, features.prefix) is not None:
                report.drop("near-duplicate")
                return False
            return True

        def accept(document: Document) -> None:
            features = self.features(document.content)
            accepted_texts.add(features.normalized)
            if self.drop_near_duplicates:
                near_index.add(document.id, features.shingles, features.prefix)

        rng_pool = random.Random(f"{seed}\x1fpool\x1f{query}")
        random_order = list(range(len(random_documents)))
        rng_pool.shuffle(random_order)

        def retriever_stream() -> Iterator[tuple[Document, str, int]]:
            for name, rank, document in pool_round_robin(ranked_lists):
                if eligible(document):
                    yield document, name, rank

        def random_stream() -> Iterator[tuple[Document, str, int]]:
            for rank, index in enumerate(random_order, start=1):
                document = random_documents[index]
                if eligible(document):
                    yield document, ORIGIN_RANDOM, rank

        streams = {"retriever": retriever_stream(), "random": random_stream()}
        exhausted: set[str] = set()
        confounders = 0
        stop_reason = ""
        while True:
            if budget_passages is not None and len(taken) >= budget_passages:
                stop_reason = "passage budget reached"
                break
            source = "retriever" if retriever_slot(ratio, confounders + 1) else "random"
            if source in exhausted:
                other = "random" if source == "retriever" else "retriever"
                if strict_ratio or other in exhausted:
                    stop_reason = f"{source} pool exhausted"
                    break
                source = other
            item = next(streams[source], None)
            if item is None:
                exhausted.add(source)
                continue
            document, origin, rank = item
            if budget_tokens is not None:
                cost = self.count_tokens([document])[0]
                if used_tokens + cost > budget_tokens:
                    stop_reason = "token budget reached"
                    report.next_candidate_cost = cost
                    report.drop("beyond the budget")
                    break
                used_tokens += cost
            accept(document)
            taken.append((document, origin, rank))
            confounders += 1
            if origin == ORIGIN_RANDOM:
                report.random_selected += 1
            else:
                report.retriever_selected += 1
                report.per_retriever[origin] = report.per_retriever.get(origin, 0) + 1
        report.stop_reason = stop_reason
        report.achieved_ratio = report.retriever_selected / confounders if confounders else None
        report.used = used_tokens if budget_tokens is not None else len(taken)

        order = list(range(len(taken)))
        if shuffle:
            random.Random(f"{seed}\x1fshuffle\x1f{query}").shuffle(order)
        documents = []
        for position, index in enumerate(order, start=1):
            document, origin, rank = taken[index]
            meta = dict(document.meta or {})
            meta.update(passage_id=format_passage_id(position), origin=origin, rank=rank)
            documents.append(Document(id=document.id, content=document.content, meta=meta, score=document.score))
        return CorpusResult(documents=documents, report=report)
