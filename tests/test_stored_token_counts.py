"""Token counts stored with each passage at indexing: the corpus builder reads them and builds the same corpora.

Real inputs throughout: the bundled sample index (which stores the SmolLM2 counts: `corpus.count_tokens_for`
defaults to the bundled reader's tokenizer), its BM25 and dense rankings for NQ-sample questions, and the real
SmolLM2 tokenizer (and a real change to it).
"""

import copy
import dataclasses
import logging

import pytest
from haystack import Document

from icr2_components.builders import ConfounderAwareCorpusBuilder
from icr2_components.kilt.tasks import read_kilt_tasks
from icr2_components.models.cache import MODEL_CACHE
from icr2_components.models.token_counting import TOKEN_COUNTS_META, PassageTokenCounter, tokenizer_fingerprint
from icr2_components.stores import load_index_config, open_index
from icr2_components.stores.config import ConfigError, config_fingerprint
from icr2_components.stores.handle import store_fingerprint

READER = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def sample_index():
    return open_index("indexing/kilt-sample.yaml")


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    return MODEL_CACHE.tokenizer(READER)


def without_counts(documents):
    """The same passages as a store without stored counts returns them."""
    return [dataclasses.replace(d, meta={k: v for k, v in d.meta.items() if k != TOKEN_COUNTS_META}) for d in documents]


def test_the_index_stores_each_passage_count_under_the_tokenizer_fingerprint(sample_index, smollm2_tokenizer):
    fingerprint = tokenizer_fingerprint(smollm2_tokenizer)
    documents = sample_index.retrieve("who got the first nobel prize in physics", method="bm25", top_k=20)
    counted = PassageTokenCounter(smollm2_tokenizer, use_stored_counts=False).count_many(documents)
    assert [d.meta[TOKEN_COUNTS_META] for d in documents] == [{fingerprint: n} for n in counted]
    assert min(counted) > 20  # real passages of ~100 words, not a placeholder


def test_corpora_built_with_stored_counts_are_the_corpora_built_by_counting(sample_index, sample_files):
    """The same questions, candidates and budget: once with the index's stored counts, once with the same passages
    stripped of them (the builder tokenizes); every corpus and report is identical, and with stored counts the
    builder tokenized nothing."""
    tasks = list(read_kilt_tasks(sample_files.tasks, limit=6))
    spans = {d.id: d for d in sample_index.document_store.storage.values()}
    stored = ConfounderAwareCorpusBuilder(
        retrievers=["bm25", "dense"], budget_tokens=2500, tokenizer=READER, confounding_ratio=0.5
    )
    counting = ConfounderAwareCorpusBuilder(
        retrievers=["bm25", "dense"], budget_tokens=2500, tokenizer=READER, confounding_ratio=0.5
    )
    stopped_by_budget = 0
    for task in tasks:
        bm25 = sample_index.retrieve(task.input, method="bm25", top_k=40)
        dense = sample_index.retrieve(task.input, method="dense", top_k=40)
        randoms = sample_index.random_documents(60, seed=1, exclude_ids={d.id for d in bm25 + dense})
        gold = [spans[bm25[0].id]]  # a gold passage, so the budget counts one from the gold path too
        common = {"query": task.input, "answers": task.answers, "provenance": list(task.provenance)}
        with_stored = stored.run(**common, gold_documents=gold, bm25=bm25, dense=dense, random_documents=randoms)
        counted = counting.run(
            **common,
            gold_documents=without_counts(gold),
            bm25=without_counts(bm25),
            dense=without_counts(dense),
            random_documents=without_counts(randoms),
        )
        assert [(d.id, d.meta["origin"], d.meta["rank"]) for d in with_stored["documents"]] == [
            (d.id, d.meta["origin"], d.meta["rank"]) for d in counted["documents"]
        ]
        assert with_stored["report"] == counted["report"]
        stopped_by_budget += with_stored["report"]["stop_reason"] == "token budget reached"
    assert stopped_by_budget == len(tasks)  # the budget, hence every count, decided where each corpus ends
    assert stored._counter.cache_size() == 0  # every count came from the index
    assert counting._counter.cache_size() > 100


def test_a_changed_tokenizer_never_reads_the_stored_counts(sample_index, smollm2_tokenizer, caplog):
    """A tokenizer changed under the same name (here: a real added token) has another fingerprint; it counts
    with itself, says once that the stored counts are another tokenizer's, and gets its own counts."""
    changed = copy.deepcopy(smollm2_tokenizer)
    changed.add_tokens(["Nobel Prize in Physics"])
    assert tokenizer_fingerprint(changed) != tokenizer_fingerprint(smollm2_tokenizer)
    documents = sample_index.retrieve("who got the first nobel prize in physics", method="bm25", top_k=10)
    counter = PassageTokenCounter(changed)
    with caplog.at_level(logging.WARNING, logger="icr2_components.models.token_counting"):
        counts = counter.count_many(documents)
    assert counts == PassageTokenCounter(changed, use_stored_counts=False).count_many(documents)
    assert counts != PassageTokenCounter(smollm2_tokenizer).count_many(documents)  # the added token is used
    assert sum("token counts for other tokenizers" in r.message for r in caplog.records) == 1


def test_what_is_counted_is_part_of_the_stored_index_fingerprint():
    default = load_index_config("indexing/kilt-sample.yaml")
    assert default.corpus.count_tokens_for == [READER]
    none = load_index_config("indexing/kilt-sample.yaml", overrides={"corpus.count_tokens_for": []})
    assert store_fingerprint(none) == config_fingerprint(none) == config_fingerprint(default)  # no counts: as before
    assert store_fingerprint(default) != config_fingerprint(default)  # a saved index without counts is not reused
    for bad in ([READER, READER], [""]):
        with pytest.raises(ConfigError, match="count_tokens_for"):
            load_index_config("indexing/kilt-sample.yaml", overrides={"corpus.count_tokens_for": bad})


def test_a_document_without_stored_counts_is_counted(smollm2_tokenizer):
    counter = PassageTokenCounter(smollm2_tokenizer)
    plain = Document(
        content="Wilhelm Conrad Röntgen received the first Nobel Prize in Physics.", meta={"title": "Nobel"}
    )
    foreign = Document(content=plain.content, meta={"title": "Nobel", TOKEN_COUNTS_META: {"0" * 16: 1}})
    assert counter.count_many([plain, foreign]) == [counter.count(plain)] * 2 != [1, 1]


@pytest.mark.elasticsearch
def test_both_stores_keep_the_counts_stored_at_indexing(elasticsearch_url, es_index_name, sample_files, tmp_path):
    """The first 120 articles of the real sample, indexed into a real Elasticsearch node and into the in-memory
    store: every passage comes back from either with the count the SmolLM2 tokenizer gives it, under its
    fingerprint (kept in Elasticsearch's _source, not indexed)."""
    from icr2_components.stores import IndexHandle, index_config_from_dict

    corpus = tmp_path / "slice.jsonl"
    with open(sample_files.corpus, encoding="utf-8") as source:
        corpus.write_text("".join(line for _, line in zip(range(120), source, strict=False)), encoding="utf-8")
    stores = {
        "elasticsearch": {"type": "elasticsearch", "hosts": elasticsearch_url, "index": es_index_name},
        "in_memory": {"type": "in_memory", "persist_path": str(tmp_path / "store.json")},
    }
    counter = PassageTokenCounter(MODEL_CACHE.tokenizer(READER), use_stored_counts=False)
    for name, store in stores.items():
        handle = IndexHandle(
            index_config_from_dict(
                {
                    "name": f"slice-{name}",
                    "store": store,
                    "corpus": {"path": str(corpus)},
                    "embedding": {"enabled": False},
                    "writer": {"checkpoint_path": str(tmp_path / f"{name}.checkpoint.json")},
                }
            )
        )
        report = handle.build(progress=False)
        assert report.count_ok and report.documents_in_store > 100, name
        documents = handle.document_store.filter_documents()  # every passage, as the store gives it back
        assert len(documents) == report.documents_in_store
        assert {d.id for d in handle.retrieve("video arcade game", method="bm25", top_k=5)} <= {d.id for d in documents}
        assert [d.meta[TOKEN_COUNTS_META] for d in documents] == [
            {counter.fingerprint: n} for n in counter.count_many(documents)
        ], name
