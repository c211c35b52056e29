"""Nothing wrong in silence: each input here once gave a wrong result and exit 0.

Each test reproduces the fault on a real input (a real corpus file and index, a real label file, the real
``icr2`` command) and checks the clear error, or the right result, that replaces it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from icr2_components.errors import ConfigError
from icr2_components.stores import IndexHandle, index_config_from_dict, load_index_config
from icr2_components.stores.errors import IndexConfigMismatchError

REPO = Path(__file__).resolve().parents[1]


def icr2(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "icr2_components.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if "error:" in line]
    assert len(lines) == 1, result.stderr
    return lines[0]


# -- 1. a corpus section without its path ---------------------------------------------------------------------


@pytest.mark.unit
def test_a_corpus_section_without_path_is_refused_not_the_bundled_sample(tmp_path):
    with pytest.raises(ConfigError, match=r"section 'corpus' has no 'path'.*\{path: sample\}"):
        index_config_from_dict({"store": {"type": "in_memory"}, "corpus": {"passage_words": 50}})
    with pytest.raises(ConfigError, match="section 'corpus' has no 'path'"):
        index_config_from_dict({"store": {"type": "in_memory"}, "corpus": {}})
    config = tmp_path / "c.yaml"
    config.write_text("name: nopath\nstore: {type: in_memory}\ncorpus:\n  passage_words: 50\n")
    with pytest.raises(ConfigError, match="has no 'path'"):
        load_index_config(config)
    # asking for the sample is one explicit word
    assert (
        index_config_from_dict({"store": {"type": "in_memory"}, "corpus": {"path": "sample"}}).corpus.path == "sample"
    )


# -- 2. an in-memory store reused after its config changed ----------------------------------------------------


def _article(wikipedia_id: str, title: str, n_words: int) -> str:
    body = " ".join(f"{title.lower()}{i}" for i in range(n_words))
    return json.dumps({"wikipedia_id": wikipedia_id, "wikipedia_title": title, "text": [title, body]})


def test_an_in_memory_store_at_an_explicit_path_refuses_a_changed_config_and_index_rebuilds_it(tmp_path):
    corpus = tmp_path / "ks.jsonl"
    corpus.write_text("\n".join(_article(str(i), f"Topic{i}", 200) for i in range(4)) + "\n")
    persist = tmp_path / "store.json"
    config_path = tmp_path / "index.yaml"

    def write_config(words: int) -> None:
        config_path.write_text(yaml.safe_dump({
            "name": "explicit", "store": {"type": "in_memory", "persist_path": str(persist)},
            "corpus": {"path": str(corpus), "passage_words": words}, "embedding": {"enabled": False}}))

    write_config(100)
    built = IndexHandle(load_index_config(config_path)).build(progress=False)
    assert built.passages_streamed == 8  # 4 articles x 200 words / 100
    write_config(20)  # the same file, the passages would now be 20 words long
    changed = IndexHandle(load_index_config(config_path))
    with pytest.raises(
        IndexConfigMismatchError,
        match=r"built with config fingerprint [0-9a-f]{16}.*now gives fingerprint "
        r"[0-9a-f]{16}.*icr2 index",
    ):
        changed.retrieve("topic1 topic5", method="bm25")
    # the command says so in one line, exit 1 (it answered from the 100-word passages, exit 0)
    line = one_error_line(icr2("search", "--config", str(config_path), "-q", "topic1 topic5", "--method", "bm25"))
    assert "was built with config fingerprint" in line and "Rebuild it with `icr2 index" in line
    # rebuilding is asked for with `icr2 index`; then the answers are 20-word passages
    rebuilt = icr2("index", "--config", str(config_path))
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    documents = IndexHandle(load_index_config(config_path)).retrieve("topic1 topic5", method="bm25", top_k=3)
    assert documents and all(len(d.content.split()) == 20 for d in documents)


def test_a_store_file_without_a_config_fingerprint_is_refused(tmp_path):
    from haystack import Document
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    persist = tmp_path / "foreign.json"
    foreign = InMemoryDocumentStore()  # written by some other tool: its index name is a random uuid
    foreign.write_documents([Document(id="x", content="who got the first nobel prize in physics")])
    foreign.save_to_disk(str(persist))
    config = index_config_from_dict({"name": "f", "store": {"type": "in_memory", "persist_path": str(persist)},
                                     "corpus": {"path": "sample"}, "embedding": {"enabled": False}})
    with pytest.raises(IndexConfigMismatchError, match="no config fingerprint"):
        IndexHandle(config).retrieve("nobel prize", method="bm25")


# -- 3. label files and eval-gate records through the typed checker -------------------------------------------


def _label(i: int, closed: object, context: object, outcome: str) -> dict:
    return {"key": f"k{i}", "id": f"q{i}", "question": f"question {i}?", "answers": ["a"], "source": "nq",
            "context_kind": "gold", "passages": ["p"], "reader": "smollm2", "closed_book_answer": "x",
            "context_answer": "a", "closed_book_match": closed, "context_match": context, "outcome": outcome}


@pytest.mark.unit
def test_a_label_with_a_string_boolean_is_counted_not_read_as_true(tmp_path):
    from icr2_components.evaluation.gates.need_labels import read_labels

    labels = tmp_path / "labels.jsonl"
    lines = [json.dumps(_label(0, False, True, "context_only")), json.dumps(_label(1, True, True, "both_right")),
             json.dumps(_label(2, "false", True, "context_only")),  # bool("false") is True
             json.dumps(_label(3, False, "true", "context_only")),
             '{"key": "k4", "id": "q4", "closed_book', "not json at all",
             json.dumps({"note": "a line of something else"}),
             json.dumps(_label(5, True, False, "context_only"))]  # an outcome the matches contradict
    labels.write_text("\n".join(lines) + "\n")
    labelled, described = read_labels([labels])
    assert [q.id for q in labelled] == ["q0", "q1"]
    # the closed-book answer match of the file is 1/2, not 2/3 (q2's "false" read as a match)
    assert sum(q.closed_book_match for q in labelled) / len(labelled) == 0.5
    assert described["skips"]["counts"] == {"wrongly typed field": 2, "malformed JSON": 2, "not a label line": 1,
                                            "outcome disagrees with the matches": 1}
    assert described["unreadable_lines"] == 6
    assert described["skips"]["examples"]["wrongly typed field"][0] == (
        "line 3: closed_book_match is 'false' (a string); expected a boolean (true or false).")
    nothing = tmp_path / "other.jsonl"
    nothing.write_text(json.dumps({"question": "q", "answers": ["a"]}) + "\n")
    with pytest.raises(ValueError, match=r"no line is a label.*not a label file"):
        read_labels([nothing])


@pytest.mark.unit
def test_eval_gate_records_whose_context_holds_non_strings_are_counted(tmp_path):
    from icr2_components.evaluation.gates.gate_eval import read_retrievalqa_jsonl

    path = tmp_path / "gate.jsonl"
    rows = [{"question": "Who won?", "ground_truth": ["Alice"], "context": ["Alice won.", {"title": "T", "text": "x"}]},
            {"question": "How many?", "ground_truth": ["8"], "context": [8, "eight"]},
            {"question": "Where?", "ground_truth": ["Paris"], "context": [["nested"]]},
            {"question": "When?", "ground_truth": ["1901"], "context": "In 1901."}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    records, skips = read_retrievalqa_jsonl(path)
    assert [(r.question, len(r.context)) for r in records] == [("Who won?", 2), ("When?", 1)]
    assert skips.counts == {"wrongly typed field": 2}
    assert skips.examples["wrongly typed field"][0].startswith("line 2: context is [8, 'eight']")


# -- 4. compare with a reader that cannot load ------------------------------------------------------------------


def test_compare_stops_with_one_error_when_a_reader_cannot_load(tmp_path):
    """It wrote a report with n = 0 (every question "failed") and exited 0."""
    empty_model = tmp_path / "not-a-model"
    empty_model.mkdir()
    pipeline = yaml.safe_load((REPO / "pipelines" / "closed_book.yaml").read_text())
    pipeline["components"]["reader"]["init_parameters"]["model"] = str(empty_model)
    path = tmp_path / "broken_reader.yaml"
    path.write_text(yaml.safe_dump(pipeline, sort_keys=False))
    out = tmp_path / "out"
    line = one_error_line(icr2("compare", "--pipelines", str(path), "--limit", "2", "--context-types", "open",
                               "--out", str(out)))
    assert "pipeline broken_reader" in line and "cannot load" in line and "nothing was answered" in line
    assert not (out / "report.json").exists()


# -- messages that mislead, checked before work starts ----------------------------------------------------------


def test_dense_search_with_embeddings_turned_off_says_so_not_built_without(tmp_path):
    corpus = tmp_path / "ks.jsonl"
    corpus.write_text(_article("1", "Alpha", 30) + "\n")
    config = index_config_from_dict(
        {
            "name": "noemb",
            "store": {"type": "in_memory", "persist_path": str(tmp_path / "s.json")},
            "corpus": {"path": str(corpus)},
            "embedding": {"enabled": False},
        }
    )
    with pytest.raises(ValueError, match=r"turns embeddings off \(embedding.enabled: false\).*use method bm25"):
        IndexHandle(config).retrieve("alpha", method="hybrid")


@pytest.mark.unit
def test_a_knn_vectors_file_of_random_bytes_is_named_not_a_pickle_question(tmp_path):
    import numpy as np

    from icr2_components.gates.deciders.learned import read_knn_vectors

    noise = tmp_path / "gate.vectors.npz"
    noise.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ValueError, match=r"is not a \.npz archive.*Train the gate again") as caught:
        read_knn_vectors(noise)
    assert "allow_pickle" not in str(caught.value)
    cut = tmp_path / "cut.npz"
    np.savez(cut, vectors=np.ones((3, 4)), labels=np.ones(3))
    cut.write_bytes(cut.read_bytes()[:200])  # a zip cut short
    with pytest.raises(ValueError, match="cannot be read as the vectors and labels"):
        read_knn_vectors(cut)


def test_eval_gate_refuses_a_knn_artifact_with_a_damaged_vectors_file_before_any_method_runs(tmp_path):
    """The .npz was read when the learned method's turn came, after the methods before it had run."""
    import numpy as np

    from icr2_components.artifacts.gate_artifact import GateArtifact
    from icr2_components.evaluation.gates.gate_methods import check_held_apart, parse_methods

    artifact = GateArtifact(kind="knn", cut=0.5, objective={}, probed_ids=["nq-sample-00001"],
                            embedding_model="all-minilm-l6-v2", knn_k=3, vectors_file="gate.vectors.npz")
    (tmp_path / "gate.json").write_text(json.dumps(artifact.to_json()))
    (tmp_path / "gate.vectors.npz").write_bytes(np.random.default_rng(0).bytes(4096))
    specs = parse_methods(f"always,learned={tmp_path / 'gate.json'}")
    with pytest.raises(ValueError, match=r"is not a \.npz archive"):
        check_held_apart(specs, ["nq-sample-00002"])


def test_a_recipe_device_torch_cannot_train_on_is_refused_when_the_recipe_is_read(tmp_path):
    from icr2_components.training.recipe import RecipeError, load_recipe

    recipe = yaml.safe_load((REPO / "training" / "smollm2_cpu_rta.yaml").read_text())
    recipe["training"]["device"] = "tpu"
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(RecipeError, match=r"training.device is 'tpu'; choose cpu, cuda, cuda:N or mps"):
        load_recipe(path)
    # well-formed, but not on this machine (nor on CI's): the recipe loads (a GPU recipe is checked anywhere) and
    # `icr2 train` refuses it before the model loads, naming what it needs
    recipe["training"]["device"] = "cuda:7"
    recipe["output_dir"] = str(tmp_path / "out")
    path.write_text(yaml.safe_dump(recipe))
    assert load_recipe(path).training.device == "cuda:7"
    from icr2_components.cli import main

    assert main(["train", "--config", str(path), "--no-progress"]) == 1
    assert not (tmp_path / "out").exists()


def test_an_answer_cut_at_its_budget_is_not_a_warning_line(caplog):
    """Haystack's OpenAIChatGenerator logged one WARNING per answer cut at max_tokens (58 lines in a quickstart
    progress bar); the served reader's reply says it in finish_reason and compare counts it instead."""
    import logging

    from haystack.components.generators.chat.openai import _check_finish_reason

    import icr2_components.readers.served_chat_reader  # noqa: F401  (installs the filter)

    with caplog.at_level(logging.WARNING):
        _check_finish_reason({"finish_reason": "length", "index": 0})
        _check_finish_reason({"finish_reason": "content_filter", "index": 0})  # another cut: still said
    messages = [r.getMessage() for r in caplog.records]
    assert not any("natural stopping point" in m for m in messages), messages
    assert any("content filter" in m for m in messages), messages
