"""BiEncoderRanker on real sample passages with the real all-MiniLM-L6-v2, and the re-ranked library pipeline."""

from pathlib import Path

import pytest
from haystack import Document

from icr2_components.rankers.bi_encoder_ranker import BiEncoderRanker

ROOT = Path(__file__).resolve().parents[1]


def test_ranker_puts_the_answering_passage_first_and_keeps_top_k(minilm):
    docs = [Document(content="Berlin is the capital and largest city of Germany.", meta={"title": "Berlin"}),
            Document(content="The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
                     meta={"title": "Eiffel Tower"}),
            Document(content="Photosynthesis converts light energy into chemical energy.", meta={"title": "Plants"})]
    ranker = BiEncoderRanker(top_k=2, device="cpu")
    kept = ranker.run(query="where is the eiffel tower", documents=docs)["documents"]
    assert next(d.meta["title"] for d in kept) == "Eiffel Tower" and len(kept) == 2
    assert kept[0].score > kept[1].score and docs[1].score is None  # copies; the inputs are untouched
    assert len(ranker.run(query="x", documents=docs, top_k=None)["documents"]) == 2  # init top_k applies
    assert ranker.run(query="x", documents=[])["documents"] == []
    assert ranker._encoder is minilm  # the shared cache's copy


@pytest.mark.unit
def test_ranker_validates_and_round_trips():
    with pytest.raises(ValueError, match="top_k"):
        BiEncoderRanker(top_k=0)
    with pytest.raises(ValueError, match="cross_encoder"):
        BiEncoderRanker(cross_encoder="  ")
    with pytest.raises(ValueError, match="non-empty query"):
        BiEncoderRanker().run(query=" ", documents=[Document(content="a")])
    from haystack.core.serialization import component_from_dict, component_to_dict

    ranker = BiEncoderRanker(top_k=5, cross_encoder="some/cross-encoder", batch_size=8)
    data = component_to_dict(ranker, "ranker")  # Haystack's default serialisation
    again = component_from_dict(BiEncoderRanker, data, "ranker")
    assert (again.top_k, again.cross_encoder, again.batch_size) == (5, "some/cross-encoder", 8)
    assert component_to_dict(again, "ranker") == data


def test_reranked_pipeline_loads_declares_io_and_reorders_real_retrieval(minilm, sample_files):
    from icr2_components.pipeline_loading import load_pipeline
    from icr2_components.pipeline_spec import PipelineSpec

    spec = PipelineSpec.from_file(str(ROOT / "pipelines" / "reranked_bi_encoder.yaml"))
    assert spec.inputs["query"] == ["retriever.query", "ranker.query", "prompt.query"]
    assert spec.outputs == {"replies": "reader.replies", "documents": "ranker.documents"}
    pipeline = load_pipeline(ROOT / "pipelines" / "reranked_bi_encoder.yaml")
    ranker = pipeline.get_component("ranker")
    assert isinstance(ranker, BiEncoderRanker) and ranker.top_k == 3
    query = "who got the first nobel prize in physics"
    candidates = pipeline.get_component("retriever").run(query=query)["documents"]
    assert len(candidates) == 10
    kept = ranker.run(query=query, documents=candidates)["documents"]
    assert len(kept) == 3 and [d.score for d in kept] == sorted((d.score for d in kept), reverse=True)
    assert {d.id for d in kept} <= {d.id for d in candidates}
