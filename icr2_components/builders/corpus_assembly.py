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
        """One corpus for ``query``: every gold passage, then confounders from the retrievers' pooled lists and
        the random pool at the confounding ratio, within the budget, shuffled (see the module's conventions).

        :raises ValueError: a bad ratio or budget, a reserved retriever name, no candidates at all, or one id
            for two different texts.
        :raises BudgetTooSmallError: the gold passages alone exceed the budget.
        """
        ratio = validate_ratio(confounding_ratio)
        self._check_request(ranked_lists, budget_tokens, budget_passages)
        gold_documents = list(gold_documents or [])
        random_documents = list(random_documents or [])
        report = CorpusReport(
            mode="benchmark" if gold_documents else "production",
            budget_unit="tokens" if budget_tokens is not None else "passages",
            budget=budget_tokens if budget_tokens is not None else int(budget_passages or 0),
            confounding_ratio=ratio,
        )
        _check_candidates(ratio, ranked_lists, gold_documents, random_documents)
        checks = _CandidateChecks(self, report, answers, provenance)
        self._take_gold(checks, gold_documents, budget_tokens, budget_passages)
        report.candidates_offered = sum(len(docs) for docs in ranked_lists.values()) + len(random_documents)
        streams = {
            "retriever": checks.retriever_stream(ranked_lists),
            "random": checks.random_stream(random_documents, random.Random(f"{seed}\x1fpool\x1f{query}")),
        }
        confounders = self._fill_confounders(checks, streams, ratio, budget_tokens, budget_passages, strict_ratio)
        report.achieved_ratio = report.retriever_selected / confounders if confounders else None
        report.used = checks.used_tokens if budget_tokens is not None else len(checks.taken)
        order_seed = f"{seed}\x1fshuffle\x1f{query}" if shuffle else None
        return CorpusResult(documents=_placed(checks.taken, order_seed), report=report)

    def _check_request(
        self, ranked_lists: Mapping[str, Sequence[Document]], budget_tokens: int | None, budget_passages: int | None
    ) -> None:
        """Refuse a budget that cannot be counted and a retriever named like a passage origin."""
        validate_budget(budget_tokens, budget_passages)
        if budget_tokens is not None and self.count_tokens is None:
            raise ValueError("budget_tokens needs a tokenizer to count with; name the reader's tokenizer.")
        for name in ranked_lists:
            if name in RESERVED_ORIGINS:
                raise ValueError(f"A retriever may not be named {name!r}: it is reserved for passage origins.")

    def _token_costs(self, documents: list[Document]) -> list[int]:
        """The reader tokens of each of ``documents`` (a token budget needs the counter: checked per request)."""
        if self.count_tokens is None:
            raise ValueError("budget_tokens needs a tokenizer to count with; name the reader's tokenizer.")
        return self.count_tokens(documents)

    def _take_gold(
        self,
        checks: _CandidateChecks,
        gold_documents: list[Document],
        budget_tokens: int | None,
        budget_passages: int | None,
    ) -> None:
        """Take every distinct gold passage first (all of them, always), their overlaps excluded from the rest.

        :raises BudgetTooSmallError: the gold passages do not fit the budget.
        """
        gold = checks.unique_gold(gold_documents)
        if gold:
            costs = self._token_costs([d for d, _ in gold]) if budget_tokens is not None else [1] * len(gold)
            gold_cost = sum(costs)
            if budget_tokens is not None and gold_cost > budget_tokens:
                raise BudgetTooSmallError(
                    f"The {len(gold)} gold passage(s) need {gold_cost} tokens but "
                    f"budget_tokens={budget_tokens}; "
                    "raise the budget (every gold passage is always included in benchmark mode)."
                )
            if budget_passages is not None and len(gold) > budget_passages:
                raise BudgetTooSmallError(
                    f"There are {len(gold)} gold passages but budget_passages={budget_passages}; raise the "
                    "budget."
                )
            checks.used_tokens += gold_cost if budget_tokens is not None else 0
        for rank, (document, features) in enumerate(gold, start=1):
            checks.take(document, features, ORIGIN_GOLD, rank)
            span = document_span(document)
            if span is not None:
                checks.excluded_spans.setdefault(span[0], []).append(span[1])
        checks.report.gold = len(gold)
        checks.gold_ids = {document.id for document, _ in gold}

    def _fill_confounders(
        self,
        checks: _CandidateChecks,
        streams: dict[str, Iterator[_Candidate]],
        ratio: float,
        budget_tokens: int | None,
        budget_passages: int | None,
        strict_ratio: bool,
    ) -> int:
        """Take confounders from the two sources in the ratio's slot order until the budget or a source ends.

        :returns: the number of confounders taken (the report counts them by source and says why filling stopped).
        """
        report = checks.report
        exhausted: set[str] = set()
        confounders = 0
        stop_reason = ""
        while True:
            if budget_passages is not None and len(checks.taken) >= budget_passages:
                stop_reason = "passage budget reached"
                break
            source = "retriever" if retriever_slot(ratio, confounders + 1) else "random"
            if source in exhausted:
                other = "random" if source == "retriever" else "retriever"
                if strict_ratio or other in exhausted:
                    stop_reason = f"{source} pool exhausted"
                    break
                source = other
            candidate = next(streams[source], None)
            if candidate is None:
                exhausted.add(source)
                continue
            document, features, origin, rank = candidate
            if budget_tokens is not None:
                cost = self._token_costs([document])[0]
                if checks.used_tokens + cost > budget_tokens:
                    stop_reason = "token budget reached"
                    report.next_candidate_cost = cost
                    report.drop("beyond the budget")
                    break
                checks.used_tokens += cost
            checks.take(document, features, origin, rank)
            confounders += 1
            if origin == ORIGIN_RANDOM:
                report.random_selected += 1
            else:
                report.retriever_selected += 1
                report.per_retriever[origin] = report.per_retriever.get(origin, 0) + 1
        report.stop_reason = stop_reason
        return confounders


#: a candidate that passed the checks: ``(document, features, origin, rank)``
_Candidate = tuple[Document, PassageFeatures, str, int]


def _check_candidates(
    ratio: float,
    ranked_lists: Mapping[str, Sequence[Document]],
    gold_documents: list[Document],
    random_documents: list[Document],
) -> None:
    """Refuse a request with nothing to build from, or a ratio below 1 without a random pool."""
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


class _CandidateChecks:
    """One assembly's state: what was taken and seen, and the checks every candidate passes (each drop counted)."""

    def __init__(
        self,
        assembler: CorpusAssembler,
        report: CorpusReport,
        answers: Sequence[str] | None,
        provenance: Sequence[Provenance | Mapping] | None,
    ) -> None:
        self.assembler = assembler
        self.report = report
        self.answer_norms = normalized_answers(list(answers or []))
        self.excluded_spans: dict[str, list[Span]] = {}
        for item in provenance or []:
            wid, span = provenance_span(item)
            self.excluded_spans.setdefault(wid, []).append(span)
        self.taken: list[tuple[Document, str, int]] = []  # (document, origin, rank)
        self.seen: dict[str, str] = {}  # id -> text of every candidate looked at
        self.accepted_texts: set[str] = set()
        self.near_index = NearDuplicateIndex(assembler.near_duplicate_threshold)
        self.gold_ids: set[str] = set()
        self.used_tokens = 0

    def unique_gold(self, gold_documents: list[Document]) -> list[tuple[Document, PassageFeatures]]:
        """The gold passages once each, with their features (the same id twice with the same text is counted).

        :raises ValueError: a gold passage without text, or two different gold passages under one id.
        """
        unique: list[tuple[Document, PassageFeatures]] = []
        for document in gold_documents:
            content = document.content
            if not content or not content.strip():
                raise ValueError(f"Gold passage {document.id} has no text; a gold passage must carry its text.")
            features = self.assembler.features(content)
            if document.id in self.seen:
                if self.assembler.features(self.seen[document.id]).normalized != features.normalized:
                    raise ValueError(f"Two different gold passages share the id {document.id!r}; ids must be unique.")
                self.report.drop("duplicate gold")
                continue
            self.seen[document.id] = content
            unique.append((document, features))
        return unique

    def take(self, document: Document, features: PassageFeatures, origin: str, rank: int) -> None:
        """Put ``document`` in the corpus; later candidates are checked against its text."""
        self.taken.append((document, origin, rank))
        self.accepted_texts.add(features.normalized)
        if self.assembler.drop_near_duplicates:
            self.near_index.add(document.id, features.shingles, features.prefix)

    def eligible(self, document: Document) -> PassageFeatures | None:
        """Apply every check to one candidate: its features when it passes, else None (the reason counted)."""
        report = self.report
        features_of = self.assembler.features
        report.candidates_seen += 1
        content = document.content
        if not content or content.isspace():
            report.drop("no text")
            return None
        # the id check first: most visits are the same passage arriving from another retriever's list
        previous = self.seen.get(document.id)
        if previous is not None:
            if document.id in self.gold_ids:
                report.drop("is a gold passage")
                return None
            if previous is not content and features_of(previous).normalized != features_of(content).normalized:
                raise ValueError(
                    f"Two different candidate passages share the id {document.id!r}; ids must identify one "
                    "text (re-index, or give the retrievers' documents distinct ids)."
                )
            report.drop("same passage from another list")
            return None
        self.seen[document.id] = content
        features = features_of(content)
        span = document_span(document)
        if span is None:
            report.candidates_without_span += 1
        else:
            for gold_start, gold_end in self.excluded_spans.get(span[0], ()):
                if spans_overlap(span[1][0], span[1][1], gold_start, gold_end):
                    report.drop("overlaps gold provenance")
                    return None
        if self.answer_norms and contains_any(features.normalized, self.answer_norms):
            report.drop("contains an answer")
            return None
        if features.normalized in self.accepted_texts:
            report.drop("duplicate text")
            return None
        if self.assembler.drop_near_duplicates and self.near_index.find(features.shingles, features.prefix) is not None:
            report.drop("near-duplicate")
            return None
        return features

    def retriever_stream(self, ranked_lists: Mapping[str, Sequence[Document]]) -> Iterator[_Candidate]:
        """The retrievers' eligible passages in pooled order, each under the retriever that ranked it first."""
        for name, rank, document in pool_round_robin(ranked_lists):
            features = self.eligible(document)
            if features is not None:
                yield document, features, name, rank

    def random_stream(self, random_documents: list[Document], rng: random.Random) -> Iterator[_Candidate]:
        """The random pool's eligible passages in an order drawn from ``rng`` (drawn now, not at the first use)."""
        order = list(range(len(random_documents)))
        rng.shuffle(order)
        return self._eligible_randoms(random_documents, order)

    def _eligible_randoms(self, random_documents: list[Document], order: list[int]) -> Iterator[_Candidate]:
        for rank, index in enumerate(order, start=1):
            document = random_documents[index]
            features = self.eligible(document)
            if features is not None:
                yield document, features, ORIGIN_RANDOM, rank


def _placed(taken: list[tuple[Document, str, int]], order_seed: str | None) -> list[Document]:
    """The taken passages as new Documents in prompt order (shuffled by ``order_seed``, kept as taken without one),
    each with meta ``passage_id`` (its position), ``origin`` and ``rank``."""
    order = list(range(len(taken)))
    if order_seed is not None:
        random.Random(order_seed).shuffle(order)
    documents = []
    for position, index in enumerate(order, start=1):
        document, origin, rank = taken[index]
        meta = dict(document.meta or {})
        meta.update(passage_id=format_passage_id(position), origin=origin, rank=rank)
        documents.append(Document(id=document.id, content=document.content, meta=meta, score=document.score))
    return documents
