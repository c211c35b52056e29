"""Haystack filters on the BM25 query sent to Elasticsearch (``stores.elasticsearch.filters``): on the real node,
each filter keeps exactly the documents Haystack's own ``InMemoryDocumentStore`` keeps for it; a malformed filter
is a one-line ``FilterError`` naming what is wrong."""

from __future__ import annotations

import uuid

import pytest
import yaml
from haystack import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.errors import FilterError

from icr2_components.stores.config import load_index_config
from icr2_components.stores.elasticsearch.backend import _bm25_search
from icr2_components.stores.elasticsearch.filters import filters_to_query
from icr2_components.stores.elasticsearch.store import build_elasticsearch_store

DOCUMENTS = [
    Document(id="d1", content="passage about the river Seine in Paris", meta={"title": "Paris", "year": 1990,
                                                                                "tags": ["city", "france"]}),
    Document(id="d2", content="passage about the river Thames in London", meta={"title": "London", "year": 2005,
                                                                                 "tags": ["city", "england"]}),
    Document(id="d3", content="passage about the Alps", meta={"title": "Alps", "year": 2015, "tags": ["mountain"]}),
    Document(id="d4", content="passage about an untitled river", meta={"year": 2020}),
]

FILTERS = [
    {"field": "meta.title", "operator": "==", "value": "Paris"},
    {"field": "meta.title", "operator": "!=", "value": "Paris"},
    {"field": "meta.title", "operator": "==", "value": None},
    {"field": "meta.title", "operator": "!=", "value": None},
    {"field": "meta.year", "operator": ">=", "value": 2005},
    {"field": "meta.year", "operator": "<", "value": 2005},
    {"field": "meta.title", "operator": "in", "value": ["Paris", "Alps"]},
    {"field": "meta.title", "operator": "not in", "value": ["Paris", "Alps"]},
    {"field": "id", "operator": "in", "value": ["d2", "d4"]},
    {"operator": "AND", "conditions": [{"field": "meta.year", "operator": ">", "value": 1990},
                                       {"field": "meta.year", "operator": "<=", "value": 2015}]},
    {"operator": "OR", "conditions": [{"field": "meta.title", "operator": "==", "value": "Paris"},
                                      {"field": "meta.year", "operator": "==", "value": 2020}]},
    {"operator": "NOT", "conditions": [{"field": "meta.year", "operator": ">=", "value": 2005},
                                       {"field": "meta.title", "operator": "!=", "value": None}]},
]


@pytest.fixture(scope="module")
def es_store(tmp_path_factory):
    index = f"icr2-test-filters-{uuid.uuid4().hex[:8]}"
    path = tmp_path_factory.mktemp("filters") / "index.yaml"
    path.write_text(yaml.safe_dump({"store": {"type": "elasticsearch", "index": index}, "corpus": {"path": "sample"},
                                    "embedding": {"enabled": False}}))
    store = build_elasticsearch_store(load_index_config(path))
    store.write_documents(DOCUMENTS)
    store.client.indices.refresh(index=index)
    yield store, index
    store.client.indices.delete(index=index, ignore_unavailable=True)


@pytest.mark.elasticsearch
@pytest.mark.parametrize("filters", FILTERS, ids=[str(i) for i in range(len(FILTERS))])
def test_each_filter_keeps_what_haystacks_in_memory_store_keeps(es_store, filters):
    store, index = es_store
    reference = InMemoryDocumentStore()
    reference.write_documents(DOCUMENTS)
    expected = sorted(d.id for d in reference.filter_documents(filters))
    found = sorted(d.id for d in _bm25_search(store, index, "passage", 10, filters))
    assert found == expected, (filters, filters_to_query(filters))


@pytest.mark.parametrize("filters, message", [
    ({"field": "meta.year", "operator": "~", "value": 1}, "needs 'operator' in"),
    ({"field": "meta.year", "operator": "=="}, "needs a 'value'"),
    ({"operator": "AND", "conditions": []}, "non-empty 'conditions'"),
    ({"operator": "XOR", "conditions": [{"field": "id", "operator": "==", "value": "a"}]}, "logical filter needs"),
    ({"field": "meta.title", "operator": "in", "value": "Paris"}, "needs a list value"),
    ({"field": "meta.title", "operator": ">", "value": "Paris"}, "numbers or ISO dates"),
    ("title == Paris", "must be a dictionary"),
])
@pytest.mark.unit
def test_a_malformed_filter_is_a_one_line_filter_error(filters, message):
    with pytest.raises(FilterError, match=message) as raised:
        filters_to_query(filters)
    assert "\n" not in str(raised.value)
