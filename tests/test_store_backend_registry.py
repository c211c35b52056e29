"""A store backend is one registered class: this file adds one (a process-local store that saves nothing) and the
config, ``IndexHandle``, ``icr2 index``/``icr2 search`` and the ``IndexRetriever`` component serve it with no
other edit; an unknown ``store.type`` is refused with the registered names listed."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

import pytest
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from icr2_components.cli import main as icr2
from icr2_components.errors import ConfigError
from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.retrievers import IndexRetriever
from icr2_components.stores import index_config_from_dict, open_index
from icr2_components.stores.backend import (
    StoreBackend,
    StoreSettings,
    StoreWrite,
    UnknownStoreBackendError,
    register_store_backend,
    store_backend,
    store_backend_names,
)
from icr2_components.stores.errors import IndexNotBuiltError

NOBEL_QUESTION = "who got the first nobel prize in physics"
NOBEL_TITLE = "List of Nobel laureates in Physics"

# ------------------------------------------------------------------------------------- the whole new backend

_SCRATCH_STORES: dict[str, InMemoryDocumentStore] = {}


@dataclass
class ScratchStoreSettings(StoreSettings):
    type: str = "scratch"
    bm25_algorithm: str = "BM25Okapi"


@register_store_backend("scratch")
class ScratchStoreBackend(StoreBackend):
    """Haystack's InMemoryDocumentStore kept in this process only: built on first use, never saved."""

    settings_class = ScratchStoreSettings
    builds_on_first_use = True

    @property
    def index_name(self) -> str:
        return f"{self.config.name}-{self.fingerprint()}"

    def describe(self) -> str:
        return f"scratch store '{self.index_name}'"

    def index_exists(self) -> bool:
        return self.index_name in _SCRATCH_STORES

    def open_document_store(self):
        if not self.index_exists():
            raise IndexNotBuiltError(f"{self.describe()} was not built in this process.")
        return _SCRATCH_STORES[self.index_name]

    def write(self, documents, *, prepare=None, progress=True) -> StoreWrite:
        store = InMemoryDocumentStore(
            bm25_algorithm=self.settings.bm25_algorithm, embedding_similarity_function="cosine"
        )
        streamed = store.write_documents(list(prepare(documents) if prepare is not None else documents))
        _SCRATCH_STORES[self.index_name] = store
        self._bm25_retriever = self._embedding_retriever = None
        return StoreWrite(
            passages_streamed=streamed, count_ok=store.count_documents() == streamed, document_store=store
        )

    def bm25_retriever(self, document_store):
        return InMemoryBM25Retriever(document_store)

    def embedding_retriever(self, document_store):
        return InMemoryEmbeddingRetriever(document_store)

    def random_documents(self, document_store, n, seed, exclude_ids):
        ids = sorted(set(document_store.storage) - exclude_ids)
        return [document_store.storage[i] for i in random.Random(seed).sample(ids, min(n, len(ids)))]


# ---------------------------------------------------------------------------------------------------- tests


def write_config(tmp_path, name: str, **sections) -> str:
    config = {"name": name, "store": {"type": "scratch"}, "corpus": {"path": "sample"}, **sections}
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return str(path)


def test_the_registry_lists_the_new_backend_beside_the_built_in_ones():
    assert {"in_memory", "elasticsearch", "scratch"} <= set(store_backend_names())
    assert store_backend("scratch") is ScratchStoreBackend
    config = index_config_from_dict(
        {"store": {"type": "scratch", "bm25_algorithm": "BM25L"}, "corpus": {"path": "sample"}}
    )
    assert isinstance(config.store, ScratchStoreSettings) and config.store.bm25_algorithm == "BM25L"


@pytest.mark.unit
def test_an_unknown_store_type_is_refused_listing_the_registered_ones():
    names = ", ".join(store_backend_names())
    with pytest.raises(
        ConfigError, match=rf"store.type must be one of the registered store types \({names}\), got 'faiss'"
    ):
        index_config_from_dict({"store": {"type": "faiss"}, "corpus": {"path": "sample"}})
    with pytest.raises(
        UnknownStoreBackendError, match=rf"Unknown store type 'faiss'; registered store types: {names}\."
    ):
        store_backend("faiss")


@pytest.mark.unit
def test_the_new_backend_reads_only_its_own_keys():
    with pytest.raises(
        ConfigError,
        match=r"unknown key\(s\) \['hosts'\] in section 'store' \(type scratch\)"
        r".*allowed keys: \['bm25_algorithm', 'type'\]",
    ):
        index_config_from_dict(
            {"store": {"type": "scratch", "hosts": "http://127.0.0.1:9200"}, "corpus": {"path": "sample"}}
        )


def test_a_name_is_served_by_one_backend_and_settings_name_their_type():
    with pytest.raises(ValueError, match="'scratch' is already served by"):
        register_store_backend("scratch")(type("OtherScratch", (ScratchStoreBackend,), {}))

    @dataclass
    class MislabelledSettings(StoreSettings):
        type: str = "scratch"

    with pytest.raises(TypeError, match="must default to 'mislabelled'"):
        register_store_backend("mislabelled")(
            type("Mislabelled", (ScratchStoreBackend,), {"settings_class": MislabelledSettings})
        )
    assert "mislabelled" not in store_backend_names()


def test_icr2_index_and_search_serve_the_new_backend_over_the_sample(tmp_path, sample_files, capsys):
    config = write_config(tmp_path, "scratch-bm25", embedding={"enabled": False})
    report_path = tmp_path / "report.json"
    assert icr2(["index", "--config", config, "--no-progress", "--report", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    passages = sum(1 for _ in KiltKnowledgeSource(sample_files.corpus).passages())
    assert report["store"] == "scratch" and report["index"].startswith("scratch-bm25-")
    assert report["passages_streamed"] == report["documents_in_store"] == passages > 3000
    assert report["count_ok"] is True and report["resumed_from"] == report["rejected"] == 0
    capsys.readouterr()

    assert (
        icr2(["search", "--config", config, "--query", NOBEL_QUESTION, "--method", "bm25", "--top-k", "3", "--json"])
        == 0
    )
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 3 and hits[0]["title"] == NOBEL_TITLE
    handle = open_index(config)
    assert handle.backend.describe().startswith("scratch store 'scratch-bm25-")
    sample = handle.random_documents(5, seed=1)
    assert [d.id for d in sample] == [d.id for d in handle.random_documents(5, seed=1)] and len(sample) == 5


def test_the_retriever_component_runs_dense_and_hybrid_on_the_new_backend(tmp_path, minilm):
    config = write_config(tmp_path, "scratch-dense", corpus={"path": "sample", "max_articles": 150})
    for method in ("dense", "hybrid"):
        retriever = IndexRetriever(index=config, method=method, top_k=5)
        retriever.warm_up()  # builds the scratch index on first use, embedding it with MiniLM
        documents = retriever.run(query=NOBEL_QUESTION)["documents"]
        assert [d.meta["retrieval_rank"] for d in documents] == [1, 2, 3, 4, 5]
        assert documents[0].meta["title"] == NOBEL_TITLE, method
    assert open_index(config).count() == sum(1 for _ in open_index(config).source().passages())
