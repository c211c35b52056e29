"""BM25's text analysis on real sample passages: English stemming, stop words, the title as its own field, the
config key, a saved in-memory store reopened with another analyzer, and the Python analyzer against the real
Elasticsearch node's ``_analyze`` (tests marked ``elasticsearch``)."""

from __future__ import annotations

import pytest

from icr2_components.errors import ConfigError
from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.stores import IndexHandle, index_config_from_dict
from icr2_components.stores.in_memory_bm25 import FieldedBM25
from icr2_components.stores.text_analysis import ENGLISH_STOP_WORDS, TextAnalyzer


@pytest.fixture(scope="module")
def sample_documents(sample_files):
    return list(KiltKnowledgeSource(sample_files.corpus).documents())


@pytest.fixture(scope="module")
def english(sample_documents):
    return FieldedBM25(sample_documents, "english")


@pytest.fixture(scope="module")
def standard(sample_documents):
    return FieldedBM25(sample_documents, "standard")


def _matching(bm25: FieldedBM25, query: str) -> set[str]:
    return {d.id for d in bm25.search(query, top_k=len(bm25))}


@pytest.mark.unit
def test_english_stemming_matches_inflected_forms_in_sample_passages(sample_documents, english, standard):
    # "prizes" reaches passages that only say "prize" (or "prized") under english, not under standard
    only_singular = [
        d.id
        for d in sample_documents
        if "prize" in TextAnalyzer("standard")(f"{d.meta['title']} {d.content}")
        and "prizes" not in TextAnalyzer("standard")(f"{d.meta['title']} {d.content}")
    ]
    assert len(only_singular) >= 10, "the sample has passages about a prize that never say 'prizes'"
    english_hits, standard_hits = _matching(english, "prizes"), _matching(standard, "prizes")
    assert standard_hits < english_hits
    assert set(only_singular) <= english_hits
    assert not set(only_singular) & standard_hits
    print(f"\n'prizes': {len(english_hits)} sample passages match under english, {len(standard_hits)} under standard")


@pytest.mark.unit
def test_english_stop_words_neither_match_nor_change_the_ranking(sample_documents, english, standard):
    assert english.search("the of and is to", top_k=10) == []
    assert len(_matching(standard, "the of and is to")) > len(sample_documents) // 2
    plain = english.search("first nobel prize physics", top_k=10)
    with_stop_words = english.search("who got the first nobel prize in physics", top_k=10)
    # "who" and "got" are not stop words: compare the same content words with and without the stop words
    padded = english.search("the first of the nobel prize in the physics", top_k=10)
    assert [(d.id, d.score) for d in padded] == [(d.id, d.score) for d in plain]
    assert with_stop_words[0].meta["title"] == "List of Nobel laureates in Physics"


@pytest.mark.unit
def test_the_title_is_searched_as_its_own_field(sample_documents, english):
    analyze = TextAnalyzer("english")
    # a real passage whose text never names its article's subject: only the title can bring it up
    passage = next(
        d for d in sample_documents
        if len(analyze(d.meta["title"])) >= 2 and not set(analyze(d.meta["title"])) & set(analyze(d.content))
    )
    ranked = english.search(passage.meta["title"], top_k=50)
    assert passage.id in [d.id for d in ranked]
    # the same passages with no title: the passage does not match at all
    untitled = FieldedBM25([d.__class__(id=d.id, content=d.content, meta={}) for d in sample_documents], "english")
    assert passage.id not in _matching(untitled, passage.meta["title"])
    # and a title match adds to the content's score: the article's passages outrank the others on its title
    same_article = {d.id for d in sample_documents if d.meta["wikipedia_id"] == passage.meta["wikipedia_id"]}
    top = [d.id for d in ranked[: len(same_article)]]
    assert set(top) == same_article, (passage.meta["title"], top)


@pytest.mark.unit
def test_filters_keep_only_matching_passages(sample_documents, english):
    passage = english.search("nobel prize physics", top_k=1)[0]
    filtered = english.search(
        "nobel prize physics",
        top_k=10,
        filters={"field": "meta.title", "operator": "==", "value": passage.meta["title"]},
    )
    assert filtered and all(d.meta["title"] == passage.meta["title"] for d in filtered)
    assert filtered[0].id == passage.id


@pytest.mark.parametrize("store", ["in_memory", "elasticsearch"])
def test_an_unknown_analyzer_is_a_config_error_naming_the_choices(store):
    with pytest.raises(ConfigError, match=r"store\.analyzer must be one of english, standard, got 'french'"):
        index_config_from_dict({"store": {"type": store, "analyzer": "french"}, "corpus": {"path": "sample"}})


def test_a_saved_in_memory_store_is_searched_with_the_analyzer_of_the_config_that_opens_it(sample_documents, tmp_path):
    def handle(analyzer):
        return IndexHandle(index_config_from_dict({
            "name": "bm25-analyzer-switch",
            "store": {"type": "in_memory", "analyzer": analyzer, "persist_path": str(tmp_path / "index.json")},
            "corpus": {"path": "sample"}, "embedding": {"enabled": False},
        }))

    built = handle("english")
    built.build(progress=False, documents=iter(sample_documents[:300]))
    assert built.retrieve("the of and", method="bm25", top_k=5) == []
    reopened = handle("standard")  # the same saved file, another analyzer: its BM25 index is rebuilt, not reused
    assert reopened.backend.index_exists()
    assert len(reopened.retrieve("the of and", method="bm25", top_k=5)) == 5
    assert reopened.count() == 300


@pytest.mark.unit
def test_the_english_analyzer_keeps_lucenes_stop_list():
    assert len(ENGLISH_STOP_WORDS) == 33 and {"the", "of", "and", "with"} <= ENGLISH_STOP_WORDS
    assert TextAnalyzer("english")("Einstein's prizes were awarded") == ["einstein", "prize", "were", "award"]


@pytest.mark.elasticsearch
@pytest.mark.parametrize("analyzer", ["english", "standard"])
def test_the_python_analyzer_makes_the_tokens_of_elasticsearchs(es_client, sample_documents, analyzer):
    """On 300 real sample passages (titles and text), token for token."""
    from icr2_components.stores.text_analysis import AnalyzerUnavailableError, raise_if_analyzer_missing

    ours = TextAnalyzer(analyzer)
    texts = [text for d in sample_documents[::12] for text in (d.meta["title"], d.content)]
    differing = []
    for text in texts:
        try:
            response = es_client.indices.analyze(analyzer=analyzer, text=text)
        except Exception as error:  # a node without the analyzer gets the one-line fix
            raise_if_analyzer_missing(error, analyzer)
            if "failed to find global analyzer" in str(error):
                raise AnalyzerUnavailableError(
                    f"the node has no '{analyzer}' analyzer: restart it with scripts/elasticsearch.sh"
                ) from error
            raise
        theirs = [token["token"] for token in response["tokens"]]
        if ours(text) != theirs:
            differing.append((text[:80], sorted(set(ours(text)) ^ set(theirs))))
    print(
        f"\n{analyzer}: {len(texts) - len(differing)} of {len(texts)} sample texts analysed identically; differing: "
        f"{differing[:5]}"
    )
    assert len(differing) <= max(2, len(texts) // 200), differing[:10]


@pytest.mark.elasticsearch
def test_a_node_refusing_an_analyzer_it_lacks_gets_the_one_line_fix(es_client):
    """The node's real refusal of a mapping naming an analyzer it does not have (as the integ-test node of
    scripts/elasticsearch.sh refuses `english` until it runs the icr2-analysis-english module)."""
    import elasticsearch

    from icr2_components.stores.text_analysis import AnalyzerUnavailableError, raise_if_analyzer_missing

    index = "icr2-bm25-no-such-analyzer"
    with pytest.raises(elasticsearch.BadRequestError) as refused:
        es_client.indices.create(
            index=index, mappings={"properties": {"content": {"type": "text", "analyzer": "icr2_no_such_analyzer"}}}
        )
    assert not es_client.indices.exists(index=index)
    with pytest.raises(
        AnalyzerUnavailableError, match=r"no 'icr2_no_such_analyzer' analyzer .* Or set store\.analyzer: standard\."
    ):
        raise_if_analyzer_missing(refused.value, "icr2_no_such_analyzer")
    raise_if_analyzer_missing(refused.value, "english")  # another analyzer's refusal: not this error
