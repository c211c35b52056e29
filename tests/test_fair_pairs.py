"""Fair pairs: every pipeline in pipelines/ declares its baseline (or a reference role), and each technique's YAML
differs from its baseline's only in the components (or init parameters, or declared IO) its `differs_in` names.

The comparison is of the YAML dicts (icr2_components.pipeline_pairs), so it needs no model, index or trained
artifact; the checker's own behaviour is pinned on the library's real YAMLs with one stray change each.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from icr2_components.pipeline_pairs import (
    PairDeclarationError,
    library_pairs,
    pair_declaration,
    pair_differences,
)

pytestmark = pytest.mark.unit

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
DECLARED = library_pairs(PIPELINES)
TECHNIQUES = sorted(name for name, declaration in DECLARED.items() if declaration["baseline"])
# the retrieval-side family `icr2 compare` runs: how many passages each one shows the reader
RETRIEVAL_FAMILY_K = {
    "vanilla_rag": "retriever.top_k",
    "query_aware": "retriever.top_k",
    "reordered_recency": "retriever.top_k",
    "reordered_lost_in_the_middle": "retriever.top_k",
    "reranked_bi_encoder": "ranker.top_k",
    "reranked_recency": "ranker.top_k",
}


def load(name: str) -> dict:
    return yaml.safe_load((PIPELINES / f"{name}.yaml").read_text())


def parameter(data: dict, path: str):
    component, key = path.split(".", 1)
    return data["components"][component]["init_parameters"][key]


def test_every_pipeline_declares_a_baseline_or_a_reference_role():
    assert sorted(DECLARED) == sorted(path.stem for path in PIPELINES.glob("*.yaml"))
    for name in DECLARED:
        chain = [name]
        while DECLARED[chain[-1]]["baseline"]:
            chain.append(DECLARED[chain[-1]]["baseline"])
            assert len(chain) == len(set(chain)), f"baseline cycle: {' -> '.join(chain)}"
        assert DECLARED[chain[-1]]["role"] == "reference", f"{' -> '.join(chain)} does not end at a reference"
    assert DECLARED["closed_book"]["role"] == DECLARED["oracle"]["role"] == "reference"


@pytest.mark.parametrize("name", TECHNIQUES)
def test_technique_differs_from_its_baseline_only_in_what_it_names(name):
    baseline = DECLARED[name]["baseline"]
    problems = pair_differences(load(name), load(baseline))
    assert not problems, (f"pipelines/{name}.yaml against its baseline {baseline}.yaml (differs_in "
                          f"{DECLARED[name]['differs_in']}): " + "; ".join(problems))


def test_the_retrieval_family_shows_the_same_number_of_passages_to_the_same_reader():
    shown = {name: parameter(load(name), path) for name, path in RETRIEVAL_FAMILY_K.items()}
    assert len(set(shown.values())) == 1, f"passages shown differ across the retrieval family: {shown}"
    readers = {name: load(name)["components"]["reader"] for name in [*RETRIEVAL_FAMILY_K, "oracle", "closed_book"]}
    assert all(reader == readers["vanilla_rag"] for reader in readers.values())
    prompts = {name: load(name)["components"]["prompt"] for name in RETRIEVAL_FAMILY_K if name != "query_aware"}
    assert all(prompt == prompts["vanilla_rag"] for prompt in prompts.values())
    # the re-rankers retrieve a wider net than they keep
    for name in ("reranked_bi_encoder", "reranked_recency"):
        assert parameter(load(name), "retriever.top_k") > shown[name]
    assert DECLARED["reranked_recency"]["baseline"] == "reranked_bi_encoder"


def test_a_stray_init_parameter_is_named():
    technique, baseline = load("reordered_recency"), load("vanilla_rag")
    k = parameter(baseline, "retriever.top_k")
    technique["components"]["retriever"]["init_parameters"]["top_k"] = k + 2
    technique["components"]["reader"]["init_parameters"]["max_new_tokens"] = 64
    assert pair_differences(technique, baseline) == [
        "reader.max_new_tokens: baseline 32, technique 64 (not named in differs_in)",
        f"retriever.top_k: baseline {k}, technique {k + 2} (not named in differs_in)",
    ]
    # naming the parameter makes it part of the technique
    assert pair_differences(technique, baseline, differs_in=["reorderer", "retriever.top_k", "reader"]) == []


def test_stray_components_connections_inputs_and_outputs_are_named():
    technique, baseline = load("query_aware"), load("vanilla_rag")
    technique["components"]["extra"] = copy.deepcopy(technique["components"]["reader"])
    technique["components"]["reader"]["type"] = "icr2_components.readers.served_chat_reader.ServedChatReader"
    technique["connections"] = [c for c in technique["connections"] if c["receiver"] != "prompt.documents"]
    technique["connections"].append({"sender": "retriever.documents", "receiver": "extra.documents"})
    technique["inputs"]["query"] = ["retriever.query"]
    technique["outputs"]["documents"] = "extra.documents"
    assert pair_differences(technique, baseline) == [
        "component 'extra' is only in the technique (not named in differs_in)",
        "reader: type icr2_components.readers.local_chat_reader.LocalChatReader in the baseline, "
        "icr2_components.readers.served_chat_reader.ServedChatReader in the technique (not named in differs_in)",
        "connection retriever.documents -> prompt.documents is only in the baseline",
        "connection retriever.documents -> extra.documents is only in the technique",
        "input 'query' feeds prompt.query only in the baseline",
        "output 'documents': baseline retriever.documents, technique extra.documents",
    ]


def test_the_rewired_edge_must_run_through_the_named_components():
    # reordered: retriever -> reorderer -> prompt replaces vanilla's retriever -> prompt; allowed only through
    # the named reorderer
    technique, baseline = load("reordered_recency"), load("vanilla_rag")
    assert pair_differences(technique, baseline) == []
    assert pair_differences(technique, baseline, differs_in=["retriever"]) == [
        "component 'reorderer' is only in the technique (not named in differs_in)",
        "differs_in names component 'retriever', but it is the same in both",
        "connection reorderer.documents -> prompt.documents is only in the technique",
        "metadata.context_input: baseline 'prompt.documents', technique 'reorderer.documents'",
    ]


def test_named_differences_that_are_not_there_are_reported():
    technique, baseline = load("query_aware"), load("vanilla_rag")
    technique["components"]["prompt"]["init_parameters"]["query_aware"] = False
    assert pair_differences(technique, baseline) == [
        "differs_in names prompt.query_aware, but it is False in both"]
    assert pair_differences(load("query_aware"), baseline, differs_in=["prompt.query_aware", "ranker"]) == [
        "differs_in names component 'ranker', which neither pipeline has"]


def test_renamed_components_are_compared_under_the_baseline_names():
    technique, baseline = load("adaptive_rag"), load("query_aware")
    assert pair_differences(technique, baseline) == []
    technique["components"]["rag_reader"]["init_parameters"]["max_new_tokens"] = 8
    assert pair_differences(technique, baseline) == [
        "reader.max_new_tokens: baseline 32, technique 8 (not named in differs_in)"]


def test_an_oracle_input_may_feed_the_socket_a_named_component_fed():
    technique, baseline = load("oracle"), load("vanilla_rag")
    assert pair_differences(technique, baseline) == []  # documents -> prompt.documents replaces the retriever
    technique["inputs"]["query"] = ["prompt.query", "reader.messages"]
    assert pair_differences(technique, baseline) == ["input 'query' feeds reader.messages only in the technique"]


@pytest.mark.parametrize("metadata, message", [
    ({"technique": "x"}, "declare metadata.baseline"),
    ({"baseline": "vanilla_rag"}, "metadata.differs_in must list"),
    ({"baseline": "vanilla_rag", "differs_in": []}, "metadata.differs_in must list"),
    ({"baseline": "pipelines/vanilla_rag.yaml", "differs_in": ["x"]}, "by stem"),
    ({"role": "champion"}, "metadata.role must be one of"),
    ({"role": "reference", "differs_in": ["x"]}, "need a metadata.baseline"),
    ({"baseline": "vanilla_rag", "differs_in": ["x"], "renamed": ["a"]}, "metadata.renamed must map"),
])
def test_a_malformed_declaration_is_one_clear_error(metadata, message):
    with pytest.raises(PairDeclarationError, match=message):
        pair_declaration({"components": {}, "metadata": metadata}, "my.yaml")


def test_a_baseline_outside_the_folder_is_refused(tmp_path):
    data = load("reordered_recency")
    (tmp_path / "reordered_recency.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(PairDeclarationError, match=r"metadata\.baseline 'vanilla_rag' is not a pipeline in"):
        library_pairs(tmp_path)
