"""Position reorderers on real sample passages: conventions, budgets (real SmolLM2 tokens), determinism, bad input."""

from __future__ import annotations

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.models.cache import MODEL_CACHE
from icr2_components.models.token_counting import PassageTokenCounter
from icr2_components.reorderers import (
    GoldAtPositionReorderer,
    LostInTheMiddleReorderer,
    PrimacyReorderer,
    RecencyReorderer,
    ReverseReorderer,
)
from icr2_components.reorderers.ordering import lost_in_the_middle_order

TOKENIZER = "smollm2-135m-instruct"
ALL = (LostInTheMiddleReorderer, PrimacyReorderer, RecencyReorderer, ReverseReorderer, GoldAtPositionReorderer)


@pytest.fixture(scope="module")
def passages(sample_files):
    """30 real passages with descending scores; the 7th is marked gold."""
    documents = []
    for index, document in enumerate(KiltKnowledgeSource(sample_files.corpus).documents()):
        meta = {**document.meta, "origin": "gold" if index == 6 else "bm25"}
        documents.append(Document(id=document.id, content=document.content, meta=meta, score=100.0 - index))
        if len(documents) == 30:
            break
    return documents


@pytest.fixture(scope="module")
def counter():
    return PassageTokenCounter(MODEL_CACHE.tokenizer(TOKENIZER))


def ids(documents):
    return [d.id for d in documents]


@pytest.mark.parametrize("n", [5, 6])
@pytest.mark.unit
def test_lost_in_the_middle_puts_rank_one_first_and_rank_two_last_for_odd_and_even_n(passages, n):
    docs = passages[:n]
    out = LostInTheMiddleReorderer().run(documents=docs)["documents"]
    expected = {5: [0, 2, 4, 3, 1], 6: [0, 2, 4, 5, 3, 1]}[n]
    assert ids(out) == [docs[i].id for i in expected]
    assert out[0].id == docs[0].id and out[-1].id == docs[1].id


@pytest.mark.unit
def test_primacy_recency_and_reverse_conventions(passages):
    docs = passages[:7]
    shuffled = [docs[i] for i in (3, 0, 6, 1, 5, 2, 4)]
    assert ids(PrimacyReorderer().run(documents=docs)["documents"]) == ids(docs)
    assert ids(RecencyReorderer().run(documents=docs)["documents"]) == ids(docs[::-1])
    # by score, the input order does not matter for primacy/recency ...
    assert ids(PrimacyReorderer(relevance="score").run(documents=shuffled)["documents"]) == ids(docs)
    assert ids(RecencyReorderer(relevance="score").run(documents=shuffled)["documents"])[-1] == docs[0].id
    # ... while reverse only reverses what it is given
    assert ids(ReverseReorderer(relevance="score").run(documents=shuffled)["documents"]) == ids(shuffled[::-1])


@pytest.mark.unit
def test_gold_at_each_position_keeps_the_others_in_relevance_order(passages):
    docs = passages[:10]
    gold = docs[6]
    others = [d for d in docs if d is not gold]
    for position in range(1, 11):
        out = GoldAtPositionReorderer(position=position).run(documents=docs)["documents"]
        assert out[position - 1].id == gold.id
        assert [d.id for d in out if d.id != gold.id] == ids(others)
    last = GoldAtPositionReorderer().run(documents=docs, position=-1)["documents"]
    assert last[-1].id == gold.id
    by_id = GoldAtPositionReorderer(position=2).run(documents=docs, gold_ids=[docs[0].id, docs[1].id])["documents"]
    assert ids(by_id)[1:3] == [docs[0].id, docs[1].id]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(ALL),
    n=st.integers(1, 30),
    budget=st.one_of(st.none(), st.integers(150, 4000)),
    passages_budget=st.one_of(st.none(), st.integers(1, 30)),
)
def test_budgets_are_never_exceeded_and_outputs_are_deterministic(passages, counter, kind, n, budget, passages_budget):
    docs = passages[:n]
    has_gold = any(d.meta["origin"] == "gold" for d in docs)
    if kind is GoldAtPositionReorderer and not has_gold:
        docs = [*docs, passages[6]]
    kwargs = {"budget_tokens": budget, "budget_passages": passages_budget, "tokenizer": TOKENIZER if budget else None}
    reorderer = kind(**kwargs)
    gold_cost = counter.count(passages[6])
    if kind is GoldAtPositionReorderer and ((budget is not None and budget < gold_cost) or passages_budget == 0):
        with pytest.raises(ValueError):
            reorderer.run(documents=docs)
        return
    first = reorderer.run(documents=docs)
    second = component_from_dict(kind, component_to_dict(reorderer, "reorderer"), "reorderer").run(documents=docs)
    out, report = first["documents"], first["report"]
    assert ids(out) == ids(second["documents"])
    assert len(set(ids(out))) == len(out) and set(ids(out)) <= set(ids(docs))
    assert report["kept"] == len(out) and report["dropped_over_budget"] == len(docs) - len(out)
    if budget is not None:
        assert sum(counter.count_many(out)) == report["tokens_used"] <= budget
    if passages_budget is not None:
        assert len(out) <= passages_budget
    if kind is not GoldAtPositionReorderer and len(out) < len(docs):
        # next-fit by relevance: the kept ones are the most relevant prefix, and the next one did not fit
        assert set(ids(out)) == set(ids(docs[: len(out)]))
        next_cost = counter.count(docs[len(out)])
        assert (passages_budget is not None and len(out) == passages_budget) or (
            budget is not None and report["tokens_used"] + next_cost > budget
        )


@pytest.mark.unit
def test_lost_in_the_middle_order_is_a_permutation_with_relevance_falling_to_the_middle():
    for n in range(0, 12):
        order = lost_in_the_middle_order(n)
        assert sorted(order) == list(range(n))
        # walking in from both edges, ranks only get worse
        left, right = order[: (n + 1) // 2], order[(n + 1) // 2 :][::-1]
        assert left == sorted(left) and right == sorted(right)


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_bad_parameters_say_what_to_do(passages):
    with pytest.raises(ValueError, match="tokenizer"):
        LostInTheMiddleReorderer(budget_tokens=100)
    with pytest.raises(ValueError, match="positive integer"):
        PrimacyReorderer(budget_passages=0)
    with pytest.raises(ValueError, match="relevance must be one of"):
        RecencyReorderer(relevance="bm25")
    with pytest.raises(ValueError, match="cannot be 0"):
        GoldAtPositionReorderer(position=0)
    with pytest.raises(ValueError, match=r"outside 1\.\.5"):
        GoldAtPositionReorderer(position=6).run(documents=passages[2:7])
    with pytest.raises(ValueError, match="No gold passage"):
        GoldAtPositionReorderer().run(documents=passages[:3])
    with pytest.raises(ValueError, match="no score"):
        PrimacyReorderer(relevance="score").run(documents=[Document(content="x")])
    with pytest.raises(ValueError, match="no text"):
        ReverseReorderer().run(documents=[Document(id="a", content=None)])
    with pytest.raises(ValueError, match="repeat"):
        LostInTheMiddleReorderer().run(documents=[passages[0], passages[0]])


@pytest.mark.unit
def test_empty_input_gives_empty_output():
    for kind in (LostInTheMiddleReorderer, PrimacyReorderer, RecencyReorderer, ReverseReorderer):
        assert kind().run(documents=[])["documents"] == []
