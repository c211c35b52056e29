"""ConfounderAwareCorpusBuilder on real passages of the bundled KILT sample, real NQ tasks, the real SmolLM2 tokenizer.

Candidate lists come from Haystack's in-memory BM25 over the sample (three BM25 variants stand in for three
retrievers); the builder itself knows no store.
"""

from __future__ import annotations

import random

import pytest
from haystack import Document, Pipeline
from haystack.core.serialization import component_from_dict, component_to_dict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icr2_components.builders import ConfounderAwareCorpusBuilder
from icr2_components.builders.corpus_assembly import BudgetTooSmallError, CorpusAssembler, pool_round_robin
from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.kilt.chunking import spans_overlap
from icr2_components.kilt.tasks import PassageSpanIndex, read_kilt_tasks
from icr2_components.models.cache import MODEL_CACHE
from icr2_components.models.token_counting import PassageTokenCounter
from icr2_components.text.templates import render_cic_prompt

TOKENIZER = "smollm2-135m-instruct"


def _words(text: str) -> list[str]:
    # an independent normaliser for the checks: lower case, letters and digits only
    import re
    import unicodedata

    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    return [w for w in re.split(r"[^0-9a-z]+", text) if w and w not in {"a", "an", "the"}]


def _holds_answer(text: str, answers: list[str]) -> bool:
    joined = " ".join(_words(text))
    return any(" ".join(_words(a)) and " ".join(_words(a)) in joined for a in answers)


@pytest.fixture(scope="module")
def world(sample_files):
    """Real passages, 24 real NQ tasks with their gold passages and three real BM25 top-60 lists each."""
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    documents = list(KiltKnowledgeSource(sample_files.corpus).documents())
    by_id = {d.id: d for d in documents}
    spans = PassageSpanIndex.from_documents(documents)
    retrievers = {}
    for name, algorithm in (("okapi", "BM25Okapi"), ("bm25l", "BM25L"), ("bm25plus", "BM25Plus")):
        store = InMemoryDocumentStore(bm25_algorithm=algorithm)
        store.write_documents(documents)
        retrievers[name] = InMemoryBM25Retriever(store)
    tasks = []
    for task in read_kilt_tasks(sample_files.tasks, limit=24):
        gold = [by_id[i] for i in spans.gold_passage_ids(task.provenance)]
        query = task.input + " " + " ".join(task.answers)
        lists = {name: r.run(query=query, top_k=60)["documents"] for name, r in retrievers.items()}
        tasks.append((task, gold, lists))
    counter = PassageTokenCounter(MODEL_CACHE.tokenizer(TOKENIZER))
    return {"documents": documents, "tasks": tasks, "counter": counter}


def _independent_overlap(document: Document, gold: list[Document], task) -> bool:
    m = document.meta
    start, end = (m["start_paragraph_id"], m["start_character"]), (m["end_paragraph_id"], m["end_character"])
    for g in gold:
        if g.meta["wikipedia_id"] == m["wikipedia_id"] and spans_overlap(
            start,
            end,
            (g.meta["start_paragraph_id"], g.meta["start_character"]),
            (g.meta["end_paragraph_id"], g.meta["end_character"]),
        ):
            return True
    for p in task.provenance:
        if p.wikipedia_id == m["wikipedia_id"]:
            p_start, p_end = p.span()
            if spans_overlap(start, end, p_start, p_end):
                return True
    return False


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    task_index=st.integers(0, 23),
    retriever_count=st.integers(1, 3),
    ratio=st.sampled_from([0.0, 0.1, 0.25, 1 / 3, 0.5, 0.75, 0.9, 1.0]),
    budget=st.integers(400, 3000),
    seed=st.integers(0, 2**31),
)
def test_properties_of_a_token_budgeted_benchmark_corpus(world, task_index, retriever_count, ratio, budget, seed):
    task, gold, lists = world["tasks"][task_index]
    chosen = dict(list(lists.items())[:retriever_count])
    randoms = random.Random(seed).sample(world["documents"], 200)
    counter = world["counter"]
    assembler = CorpusAssembler(count_tokens=counter.count_many)
    kwargs = dict(answers=task.answers, gold_documents=gold, provenance=task.provenance, random_documents=randoms,
                  confounding_ratio=ratio, budget_tokens=budget, seed=seed)
    if sum(counter.count_many(gold)) > budget:
        with pytest.raises(BudgetTooSmallError):
            assembler.assemble(task.input, chosen, **kwargs)
        return
    result = assembler.assemble(task.input, chosen, **kwargs)
    documents, report = result.documents, result.report

    # every gold passage is present, and only those are marked gold
    assert {d.id for d in documents if d.meta["origin"] == "gold"} == {g.id for g in gold}
    confounders = [d for d in documents if d.meta["origin"] != "gold"]
    # no confounder overlaps gold provenance or holds an answer (checked independently of the builder)
    for document in confounders:
        assert not _independent_overlap(document, gold, task), document.id
        assert not _holds_answer(document.content, task.answers), (document.id, task.answers)
    # the ratio is met to rounding: round(p * n) retriever-selected among n confounders
    retrieved = sum(d.meta["origin"] != "random" for d in confounders)
    assert retrieved == int(ratio * len(confounders) + 0.5 + 1e-9)
    # the budget is never exceeded, also when the whole corpus is tokenized at once, and is filled to within one passage
    costs = counter.count_many(documents)
    assert sum(costs) == report.used <= budget
    rendered = render_cic_prompt("qa", task.input, documents)
    corpus_text = rendered.text[
        rendered.passage_char_spans[documents[0].meta["passage_id"]][0] : rendered.passage_char_spans[
            documents[-1].meta["passage_id"]
        ][1]
    ]
    assert counter.count_text(corpus_text) <= budget
    if report.stop_reason == "token budget reached":
        assert budget - report.used < report.next_candidate_cost
    else:
        assert report.stop_reason.endswith("pool exhausted")
    # passage ids follow the output order
    assert [d.meta["passage_id"] for d in documents] == [f"PSG{i:03d}" for i in range(1, len(documents) + 1)]
    # the same seed gives the same context
    again = CorpusAssembler(count_tokens=counter.count_many).assemble(task.input, chosen, **kwargs)
    assert [(d.id, d.meta["passage_id"], d.meta["origin"]) for d in again.documents] == [
        (d.id, d.meta["passage_id"], d.meta["origin"]) for d in documents
    ]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    task_index=st.integers(0, 23), passages=st.integers(5, 40), ratio=st.floats(0.0, 1.0), seed=st.integers(0, 10**6)
)
def test_properties_of_a_passage_budgeted_corpus(world, task_index, passages, ratio, seed):
    task, gold, lists = world["tasks"][task_index]
    randoms = random.Random(seed).sample(world["documents"], 100)
    result = CorpusAssembler().assemble(
        task.input, lists, answers=task.answers, gold_documents=gold, provenance=task.provenance,
        random_documents=randoms, confounding_ratio=ratio, budget_passages=passages, seed=seed,
    )
    documents = result.documents
    assert len(documents) <= passages
    if result.report.stop_reason == "passage budget reached":
        assert len(documents) == passages
    confounders = [d for d in documents if d.meta["origin"] != "gold"]
    assert sum(d.meta["origin"] != "random" for d in confounders) == int(ratio * len(confounders) + 0.5 + 1e-9)
    assert len({d.id for d in documents}) == len(documents)


def test_pooling_takes_ranks_top_to_bottom_across_retrievers_in_turn(world):
    _, _, lists = world["tasks"][0]
    a, b = lists["okapi"][:3], lists["bm25l"][:2]
    pooled = list(pool_round_robin({"a": a, "b": b}))
    assert [(name, rank) for name, rank, _ in pooled] == [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)]
    assert pooled[1][2] is b[0]


def test_unshuffled_production_corpus_keeps_pooled_order_and_origin(world):
    task, _, lists = world["tasks"][1]
    builder = ConfounderAwareCorpusBuilder(retrievers=["okapi", "bm25plus"], budget_passages=8, shuffle=False)
    result = builder.run(query=task.input, okapi=lists["okapi"], bm25plus=lists["bm25plus"])
    documents, report = result["documents"], result["report"]
    assert report["mode"] == "production" and len(documents) == 8
    expected = []
    seen = set()
    for name, rank, document in pool_round_robin({"okapi": lists["okapi"], "bm25plus": lists["bm25plus"]}):
        if document.id not in seen:
            seen.add(document.id)
            expected.append((document.id, name, rank))
    kept = [(d.id, d.meta["origin"], d.meta["rank"]) for d in documents]
    # near-duplicates may be dropped, so the kept ones are the pooled order minus counted drops
    assert kept == [e for e in expected if e[0] in {k[0] for k in kept}]
    assert kept[0] == expected[0]
    assert report["candidates_seen"] == len(documents) + sum(report["dropped"].values())


def test_run_time_overrides_and_to_dict_round_trip():
    builder = ConfounderAwareCorpusBuilder(
        retrievers=["bm25", "dense"], budget_tokens=2000, tokenizer=TOKENIZER, confounding_ratio=0.5, seed=3
    )
    data = component_to_dict(builder, "builder")  # Haystack's default serialisation: every __init__ parameter
    assert data["init_parameters"]["retrievers"] == ["bm25", "dense"]
    assert data["init_parameters"]["confounding_ratio"] == 0.5 and data["init_parameters"]["seed"] == 3
    clone = component_from_dict(ConfounderAwareCorpusBuilder, data, "builder")
    assert component_to_dict(clone, "builder") == data
    alone = Pipeline()
    alone.add_component("builder", clone)
    assert {"bm25", "dense", "query", "confounding_ratio"} <= set(alone.inputs()["builder"])  # Haystack's public view
    documents = [
        Document(id=f"d{i}", content=f"passage number {i} about rivers and lakes in place {i * 7}", meta={"title": "T"})
        for i in range(12)
    ]
    result = clone.run(query="q", bm25=documents[:6], dense=documents[6:], budget_passages=4, confounding_ratio=1.0)
    assert len(result["documents"]) == 4 and result["report"]["budget_unit"] == "passages"


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_confounding_ratio_outside_unit_interval_is_an_error():
    with pytest.raises(ValueError, match=r"confounding_ratio must be in \[0, 1\]"):
        ConfounderAwareCorpusBuilder(budget_passages=5, confounding_ratio=1.5)
    builder = ConfounderAwareCorpusBuilder(budget_passages=5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        builder.run(query="q", candidates={"x": [Document(content="a b c")]}, confounding_ratio=-0.1)


def test_empty_candidate_lists(world):
    builder = ConfounderAwareCorpusBuilder(retrievers=["bm25"], budget_passages=5)
    with pytest.raises(ValueError, match="No candidates"):
        builder.run(query="q", bm25=[])
    # benchmark mode with nothing retrieved: documented behaviour, the corpus is the gold passages alone
    task, gold, _ = world["tasks"][2]
    result = builder.run(query=task.input, bm25=[], gold_documents=gold, answers=task.answers)
    assert [d.meta["origin"] for d in result["documents"]] == ["gold"] * len(gold)
    assert result["report"]["stop_reason"] == "retriever pool exhausted"


def test_budget_smaller_than_the_gold_passages_is_an_error(world):
    task, gold, lists = world["tasks"][0]
    builder = ConfounderAwareCorpusBuilder(retrievers=["okapi"], budget_tokens=50, tokenizer=TOKENIZER)
    with pytest.raises(BudgetTooSmallError, match="raise the budget"):
        builder.run(query=task.input, gold_documents=gold, okapi=lists["okapi"])
    with pytest.raises(ValueError, match="budget_passages"):
        ConfounderAwareCorpusBuilder(retrievers=["okapi"], budget_passages=1).run(
            query=task.input, gold_documents=[*gold, lists["okapi"][5]], okapi=lists["okapi"]
        )


def test_documents_without_text_are_counted_and_never_used(world):
    _, _, lists = world["tasks"][3]
    empty = [Document(id="empty-1", content=None), Document(id="empty-2", content="   ")]
    result = ConfounderAwareCorpusBuilder(budget_passages=5).run(query="q", candidates={"r": empty + lists["okapi"]})
    assert result["report"]["dropped"]["no text"] == 2
    assert not {"empty-1", "empty-2"} & {d.id for d in result["documents"]}
    with pytest.raises(ValueError, match="has no text"):
        ConfounderAwareCorpusBuilder(budget_passages=5).run(
            query="q", gold_documents=[Document(id="g", content="")], candidates={"r": lists["okapi"]}
        )


def test_duplicate_ids(world):
    _, _, lists = world["tasks"][4]
    first = lists["okapi"][0]
    # the same passage from two retrievers is kept once and counted
    result = ConfounderAwareCorpusBuilder(budget_passages=3).run(query="q", candidates={"a": [first], "b": [first]})
    assert [d.id for d in result["documents"]] == [first.id]
    assert result["report"]["dropped"] == {"same passage from another list": 1}
    # one id naming two different texts is an error
    impostor = Document(id=first.id, content="a completely different text about something else entirely")
    with pytest.raises(ValueError, match="share the id"):
        ConfounderAwareCorpusBuilder(budget_passages=3).run(query="q", candidates={"a": [first], "b": [impostor]})


def test_near_duplicates_and_exact_duplicates_under_other_ids_are_dropped(world):
    _, _, lists = world["tasks"][5]
    original = lists["okapi"][0]
    copy = Document(id="copy", content=original.content.upper(), meta=dict(original.meta))
    near = Document(id="near", content=original.content + " Also one more sentence.", meta={"title": "x"})
    result = ConfounderAwareCorpusBuilder(budget_passages=10).run(
        query="q", candidates={"a": [original, copy, near, *lists["okapi"][1:4]]}
    )
    ids = [d.id for d in result["documents"]]
    assert original.id in ids and "copy" not in ids and "near" not in ids
    assert result["report"]["dropped"]["duplicate text"] == 1
    assert result["report"]["dropped"]["near-duplicate"] == 1


def test_random_pool_is_required_below_ratio_one(world):
    _, _, lists = world["tasks"][0]
    with pytest.raises(ValueError, match="random_documents"):
        ConfounderAwareCorpusBuilder(budget_passages=5, confounding_ratio=0.5).run(query="q", candidates=lists)


@pytest.mark.unit
def test_bad_init_parameters_say_what_to_do():
    with pytest.raises(ValueError, match="tokenizer"):
        ConfounderAwareCorpusBuilder(budget_tokens=1000)
    with pytest.raises(ValueError, match=r"budget_tokens.*budget_passages"):
        ConfounderAwareCorpusBuilder()
    with pytest.raises(ValueError, match="reserved"):
        ConfounderAwareCorpusBuilder(retrievers=["gold"], budget_passages=3)
    with pytest.raises(ValueError, match="identifiers"):
        ConfounderAwareCorpusBuilder(retrievers=["my retriever"], budget_passages=3)
