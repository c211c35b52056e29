"""Odd values that once passed through the components without a word: a NaN or infinite score in a reorderer, a
passage of characters that print nothing (a zero-width space) in every corpus format and in documents given to an
index, a document with no text before the bi-encoder ranker, and a retrieval-head artifact naming a head its model
does not have. Each is now a clear error naming the input, or a named skip ("empty text")."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from haystack import Document

from icr2_components.artifacts.retrieval_heads import RetrievalHeadArtifact
from icr2_components.corpora import corpus_reader, corpus_settings_from_mapping
from icr2_components.reorderers import (
    GoldAtPositionReorderer,
    LostInTheMiddleReorderer,
    PrimacyReorderer,
    RecencyReorderer,
    ReverseReorderer,
)
from icr2_components.text.blank import is_blank

ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"
SHIPPED_HEADS = Path(__file__).resolve().parents[1] / "icr2_components/resources/artifacts/rap_heads_smollm2.json"


def _scored(*scores) -> list[Document]:
    return [Document(id=f"d{i}", content=f"passage {i}", score=s) for i, s in enumerate(scores)]


# -- NaN and infinite scores: refused, naming the document -------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("kind", [LostInTheMiddleReorderer, PrimacyReorderer, RecencyReorderer, ReverseReorderer])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "0.9"])
def test_a_score_that_is_not_a_finite_number_is_refused_naming_the_document(kind, bad):
    documents = _scored(0.9, bad, 0.5)
    with pytest.raises(ValueError, match=r"Document d1 has score .* not a finite number"):
        kind(relevance="score").run(documents=documents)


@pytest.mark.unit
def test_gold_at_position_refuses_a_nan_score_among_the_others():
    with pytest.raises(ValueError, match="Document d2"):
        GoldAtPositionReorderer(relevance="score").run(documents=_scored(0.9, 0.8, math.nan), gold_ids=["d0"],
                                                       position=2)


@pytest.mark.unit
def test_finite_scores_still_order_and_nan_is_ignored_by_input_order():
    ordered = PrimacyReorderer(relevance="score").run(documents=_scored(0.1, 0.9, 0.5))["documents"]
    assert [d.id for d in ordered] == ["d1", "d2", "d0"]
    # input order never reads the score: a NaN there changes nothing
    kept = PrimacyReorderer().run(documents=_scored(0.1, math.nan, 0.5))["documents"]
    assert [d.id for d in kept] == ["d0", "d1", "d2"]


# -- characters that print nothing are empty text -----------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("text", ["", "  \n\t", "\u200b", ZERO_WIDTH * 3, "\u00ad\u3164\u2800", " \u200b \ufe0f "])
def test_blank_texts(text):
    assert is_blank(text)


@pytest.mark.unit
@pytest.mark.parametrize("text", ["a", "\u200bword\u200b", "١", "日本", "-", "\u0301e"])
def test_texts_that_show_something_are_not_blank(text):
    assert not is_blank(text)


def _read(mapping: dict) -> tuple[list[Document], dict]:
    reader = corpus_reader(corpus_settings_from_mapping({**mapping, "count_tokens_for": []}, "test"))
    documents = list(reader.documents())
    return documents, reader.skips.as_dict()


@pytest.mark.unit
def test_a_jsonl_record_of_zero_width_characters_is_skipped_as_empty_text(tmp_path):
    path = tmp_path / "corpus.jsonl"
    rows = [{"id": "a", "text": "Paris is the capital of France."}, {"id": "b", "text": ZERO_WIDTH * 4},
            {"id": "c", "text": "Berlin is the capital of Germany."}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    documents, skips = _read({"format": "jsonl", "path": str(path)})
    assert [d.meta.get("passage_index") is not None for d in documents] and len(documents) == 2
    assert all("\u200b" not in d.content for d in documents)
    assert skips["counts"] == {"empty text": 1}


@pytest.mark.unit
def test_a_csv_row_of_zero_width_characters_is_skipped_as_empty_text(tmp_path):
    path = tmp_path / "corpus.csv"
    path.write_text(f"id,title,text\n1,A,Alpha text here\n2,B,{ZERO_WIDTH}\n3,C,Gamma text here\n", encoding="utf-8")
    documents, skips = _read({"format": "csv", "path": str(path)})
    assert len(documents) == 2 and skips["counts"] == {"empty text": 1}


@pytest.mark.unit
def test_a_kilt_article_of_zero_width_paragraphs_is_skipped_as_an_article_with_no_text(tmp_path):
    path = tmp_path / "kilt.jsonl"
    articles = [{"wikipedia_id": "1", "wikipedia_title": "One", "text": ["One", "A paragraph of real words."]},
                {"wikipedia_id": "2", "wikipedia_title": "Two", "text": ["Two", ZERO_WIDTH, "\u200b\u200b"]}]
    path.write_text("\n".join(json.dumps(a) for a in articles) + "\n", encoding="utf-8")
    documents, skips = _read({"format": "kilt", "path": str(path)})
    assert {d.meta.get("wikipedia_id", d.id.split("-")[0]) for d in documents} == {"1"}
    assert skips["counts"] == {"article with no text": 1}


@pytest.mark.unit
def test_a_folder_file_of_zero_width_characters_is_skipped_as_empty_text(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "real.txt").write_text("Real words in a real file.\n", encoding="utf-8")
    (folder / "invisible.txt").write_text(ZERO_WIDTH * 10 + "\n", encoding="utf-8")
    documents, skips = _read({"format": "folder", "path": str(folder)})
    assert [d.meta["file_path"] for d in documents] == ["real.txt"]
    assert skips["counts"] == {"empty text": 1}


@pytest.mark.unit
def test_documents_given_to_an_index_with_no_visible_text_are_named_skips(tmp_path):
    from icr2_components.stores import IndexHandle
    from icr2_components.stores.config import index_config_from_dict

    config = index_config_from_dict({"name": "blank", "store": {"type": "in_memory"},
                                     "corpus": {"path": "sample", "count_tokens_for": []},
                                     "embedding": {"enabled": False}}, "test")
    handle = IndexHandle(config)
    given = [Document(id="a", content="Paris is the capital of France."), Document(id="b", content=ZERO_WIDTH),
             Document(id="c", content=None), Document(id="d", content="Berlin is the capital of Germany.")]
    report = handle.build(progress=False, documents=given)
    assert report.documents_in_store == 2
    assert report.skips["counts"] == {"empty text": 2}
    assert {d.id for d in handle.document_store.filter_documents()} == {"a", "d"}


# -- a retrieval-head artifact naming a head its model does not have ---------------------------------------------


def _shipped() -> dict:
    return json.loads(SHIPPED_HEADS.read_text())


@pytest.mark.unit
def test_an_artifact_whose_heads_name_layer_99_is_refused_at_load(tmp_path):
    data = _shipped()
    data["heads"][0] = [99, 0]  # the ranking the filter reads is untouched: the heads named are not those used
    path = tmp_path / "heads.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="layer 99, head 0, outside the probed model's 30 layers x 9 heads"):
        RetrievalHeadArtifact.load(path)


@pytest.mark.unit
def test_an_artifact_whose_heads_are_not_its_rankings_first_q_is_refused(tmp_path):
    data = _shipped()
    data["heads"][0], data["heads"][1] = data["heads"][1], data["heads"][0]
    path = tmp_path / "heads.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not its ranking's first Q=4"):
        RetrievalHeadArtifact.load(path)


@pytest.mark.unit
@pytest.mark.parametrize("pair", [["18", 6], [18], [18.0, 6], [True, 6], "L18H6"])
def test_an_artifact_head_that_is_not_a_pair_of_integers_is_refused(tmp_path, pair):
    data = _shipped()
    data["ranking"][0] = pair
    data["heads"][0] = pair
    path = tmp_path / "heads.json"
    path.write_text(json.dumps(data))
    # a pair of the wrong types is refused by the declared type (naming the file, the key and the item), a pair of
    # integers of the wrong length by the artifact's own check
    with pytest.raises(ValueError, match=r"heads.json: key '(heads|ranking)' is .*; expected a list of lists of "
                       r"integers \(item \[0\](\[0\])? is |not a \[layer, head\] pair of integers"):
        RetrievalHeadArtifact.load(path)


@pytest.mark.unit
def test_check_heads_names_the_shape_it_was_checked_against():
    artifact = RetrievalHeadArtifact.load(SHIPPED_HEADS)
    artifact.check_heads(30, 9, "the reader")
    with pytest.raises(ValueError, match="layer 23, head 2, outside the reader x's 20 layers x 9 heads"):
        artifact.check_heads(20, 9, "the reader x")


def test_rap_refuses_at_warm_up_an_artifact_whose_heads_the_loaded_smollm2_lacks(tmp_path, smollm2):
    """The artifact claims a 100-layer SmolLM2 and ranks layer 99: consistent with itself, so it loads; the real
    SmolLM2 (30 layers) loaded at warm-up has no layer 99, and the filter says so before anything runs."""
    from icr2_components.filters import RetrievalAttentionFilter

    data = _shipped()
    data["model_signature"] = {**data["model_signature"], "num_layers": 100}
    data["hit_rates"] = [[[0.0] * 9 for _ in range(100)] for _ in data["hit_rates"]]
    data["ranking"] = [[99, 0], *data["ranking"][1:]]
    data["heads"] = data["ranking"][: data["q"]]
    path = tmp_path / "heads_layer99.json"
    path.write_text(json.dumps(data))
    rap = RetrievalAttentionFilter(artifact=str(path), dtype="float32", device="cpu")
    with pytest.raises(ValueError, match=r"layer 99, head 0, outside the reader smollm2-135m-instruct's 30 layers"):
        rap.warm_up()
    assert dataclasses.asdict(rap._load_artifact())["ranking"][0] == [99, 0] and rap._model is None


# -- a document with no text before the bi-encoder ranker ---------------------------------------------------------


def test_the_bi_encoder_refuses_a_document_with_no_text_instead_of_ranking_it_first(minilm):
    """With the real all-MiniLM-L6-v2: a content-less document (its title only, or nothing) is refused, naming it,
    where its embedding (of the title or of nothing) would otherwise be scored against the query."""
    from icr2_components.rankers.bi_encoder_ranker import BiEncoderRanker

    ranker = BiEncoderRanker(top_k=2, device="cpu")
    real = [Document(id="eiffel", content="The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
                     meta={"title": "Eiffel Tower"}),
            Document(id="berlin", content="Berlin is the capital and largest city of Germany.",
                     meta={"title": "Berlin"})]
    for empty in (Document(id="empty", content=None, meta={"title": "Eiffel Tower in Paris"}),
                  Document(id="empty", content=""), Document(id="empty", content=ZERO_WIDTH)):
        with pytest.raises(ValueError, match="Document empty has no text"):
            ranker.run(query="where is the eiffel tower", documents=[*real, empty])
    kept = ranker.run(query="where is the eiffel tower", documents=real)["documents"]
    assert [d.id for d in kept] == ["eiffel", "berlin"]
    with pytest.raises(ValueError, match="documents"):
        ranker.run(query="where is the eiffel tower", documents=None)


@pytest.mark.unit
@pytest.mark.parametrize("change, says", [
    (lambda d: d.update(layers_used=[18]), r"unknown key\(s\) \['layers_used'\]"),
    (lambda d: d.pop("ranking"), r"no \['ranking'\]"),
    (lambda d: d.pop("model_signature"), r"no \['model_signature'\]"),
    (lambda d: d["model_signature"].update(num_layers="30"), "num_layers and num_heads as integers"),
])
def test_an_artifact_with_keys_added_or_removed_is_refused_naming_the_file(tmp_path, change, says):
    data = _shipped()
    change(data)
    path = tmp_path / "edited_heads.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=f"edited_heads.json.*{says}|{says}"):
        RetrievalHeadArtifact.load(path)
