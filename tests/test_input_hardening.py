"""Bad input on the in-memory side: nothing lost or corrupted, typed values, clear errors.

Every case is a real file on disk read by the real reader; the models are the bundled MiniLM where an index
is built. The Elasticsearch side of the same cases is in test_elasticsearch_hardening.py.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from icr2_components.errors import ConfigError
from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.kilt.seen_ids import SeenIds
from icr2_components.records import CorpusReadError, SkipReport
from icr2_components.records.reading import iter_jsonl
from icr2_components.stores import IndexHandle, index_config_from_dict, load_index_config
from icr2_components.stores.errors import EmptyCorpusError, EmptyIndexError
from icr2_components.strict_mapping import TypeCheckError, check_type

REPO = Path(__file__).resolve().parents[1]


def article(wikipedia_id, title, *paragraphs) -> str:
    return json.dumps({"wikipedia_id": wikipedia_id, "wikipedia_title": title, "text": [title, *paragraphs]})


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


# -- the corpus reader ----------------------------------------------------------------------------------------


def test_a_repeated_wikipedia_id_keeps_the_first_article_whole_and_is_counted(tmp_path):
    path = tmp_path / "ks.jsonl"
    first = [words("first", 100), words("firstb", 100), words("firstc", 50)]  # 3 passages
    second = [words("second", 100)]  # would overwrite passage 0 of the first article
    path.write_text("\n".join([article("7", "Seven", *first), article("8", "Eight", "eight words here"),
                               article("7", "Seven again", *second), article(7, "Seven as a number", "x y z")]) + "\n")
    source = KiltKnowledgeSource(path, passage_words=100)
    passages = list(source.passages())
    assert [p.id for p in passages] == ["7-w100-00000", "7-w100-00001", "7-w100-00002", "8-w100-00000"]
    assert passages[0].text.split()[0] == "first0" and passages[0].title == "Seven"
    # both repeats counted, with their line numbers (the integer 7 is the same article as "7")
    assert source.skips.counts == {"duplicate wikipedia_id (first record kept)": 2}
    assert source.skips.examples["duplicate wikipedia_id (first record kept)"] == [
        "line 3: wikipedia_id=7",
        "line 4: wikipedia_id=7",
    ]


def test_in_memory_index_of_a_corpus_with_repeats_stores_every_streamed_passage(tmp_path):
    path = tmp_path / "ks.jsonl"
    lines = [article(str(i), f"T{i}", words(f"a{i}x", 150)) for i in range(10)]  # 2 passages each
    lines.insert(5, article("3", "T3 again", words("zzz", 300)))  # 3 passages that would overwrite 2 of T3
    path.write_text("\n".join(lines) + "\n")
    config = index_config_from_dict({
        "name": "dups", "store": {"type": "in_memory", "persist_path": str(tmp_path / "index.json")},
        "corpus": {"path": str(path)}, "embedding": {"enabled": False},
    })
    report = IndexHandle(config).build(progress=False)
    assert report.passages_streamed == 20 and report.documents_in_store == 20
    assert report.skips["counts"] == {"duplicate wikipedia_id (first record kept)": 1}
    stored = IndexHandle(config).document_store.filter_documents(
        {"field": "meta.wikipedia_id", "operator": "==", "value": "3"}
    )
    assert {d.meta["title"] for d in stored} == {"T3"} and not any("zzz" in d.content for d in stored)


def test_a_line_that_is_not_utf8_is_counted_with_its_number_and_the_rest_is_read(tmp_path):
    path = tmp_path / "ks.jsonl"
    good_a, good_b = article("1", "A", "alpha beta").encode(), article("3", "C", "gamma delta").encode()
    bad = article("2", "B", "caf_ beta").encode().replace(b"caf_", b"caf\xff")
    path.write_bytes(b"\n".join([good_a, bad, good_b]) + b"\n")
    source = KiltKnowledgeSource(path)
    assert [p.wikipedia_id for p in source.passages()] == ["1", "3"]
    assert source.skips.counts == {"not UTF-8": 1}
    (example,) = source.skips.examples["not UTF-8"]
    assert example.startswith("line 2: byte ") and "0xff" in example


def test_a_utf8_bom_on_the_first_line_is_not_a_malformed_article(tmp_path):
    path = tmp_path / "ks.jsonl"
    path.write_bytes(
        b"\xef\xbb\xbf" + article("1", "A", "alpha beta").encode() + b"\n" + article("2", "B", "beta").encode() + b"\n"
    )
    source = KiltKnowledgeSource(path)
    assert [p.wikipedia_id for p in source.passages()] == ["1", "2"]
    assert source.skips.total == 0


def test_a_gz_that_is_not_gzip_and_a_cut_gzip_are_clear_errors(tmp_path):
    fake = tmp_path / "ks.jsonl.gz"
    fake.write_text(article("1", "A", "alpha") + "\n")
    with pytest.raises(CorpusReadError, match=r"named \.gz but is not gzip-compressed"):
        list(KiltKnowledgeSource(fake).passages())
    real = tmp_path / "real.jsonl.gz"
    real.write_bytes(
        gzip.compress(("\n".join(article(str(i), f"T{i}", words("w", 50)) for i in range(200)) + "\n").encode())
    )
    assert len(list(KiltKnowledgeSource(real).passages())) == 200
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(real.read_bytes()[: len(real.read_bytes()) // 2])
    with pytest.raises(CorpusReadError, match="gzip stream is damaged after line"):
        list(KiltKnowledgeSource(cut).passages())


def test_wrongly_typed_fields_and_paragraphs_are_counted(tmp_path):
    path = tmp_path / "ks.jsonl"
    path.write_text("\n".join([
        json.dumps({"wikipedia_id": True, "wikipedia_title": "A", "text": ["A", "x"]}),
        json.dumps({"wikipedia_id": "2", "wikipedia_title": 5, "text": ["5", "x"]}),
        json.dumps({"wikipedia_id": "3", "wikipedia_title": "C", "text": ["C", 42, "kept words", None]}),
    ]) + "\n")
    source = KiltKnowledgeSource(path)
    passages = list(source.passages())
    assert [p.text for p in passages] == ["kept words"]
    assert source.skips.counts == {
        "wikipedia_id is not a string or an integer": 1,
        "wikipedia_title is not a string": 1,
        "paragraph is not a string": 2,
    }


def test_iter_jsonl_counts_bad_utf8_in_any_data_file(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "\xc3\x28"}\n{"a": 3}\n')
    skips = SkipReport(source=str(path))
    assert [r["a"] for _, r in iter_jsonl(path, skips)] == [1, 3]
    assert skips.counts == {"not UTF-8": 1}


def test_seen_ids_bitmap_and_set_agree_with_a_plain_set():
    seen, plain = SeenIds(), set()
    ids = ["1", "1", "0", "007", "7", "abc", "abc", str(2**40), str(2**40), "65000000", "65000000", 12, "12"]
    for value in ids:
        assert seen.add(value) == (str(value) not in plain)
        plain.add(str(value))
    assert len(seen) == len(plain)
    assert "007" in seen and "8" not in seen


# -- typed configs, recipes and records -----------------------------------------------------------------------


def sample_config(**sections) -> dict:
    base = {"name": "t", "store": {"type": "in_memory"}, "corpus": {"path": "sample"}}
    for key, value in sections.items():
        base[key] = value
    return base


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        (
            "embedding",
            {"enabled": "false"},
            r"section 'embedding' of config: key 'enabled' is 'false' \(a string\); expected a boolean",
        ),
        (
            "corpus",
            {"passage_words": "one hundred"},
            r"key 'passage_words' is 'one hundred' \(a string\); expected an integer",
        ),
        ("corpus", {"passage_words": 100.7}, r"key 'passage_words' is 100.7 \(a number\); expected an integer"),
        ("corpus", {"passage_words": True}, r"key 'passage_words' is True \(a boolean\); expected an integer"),
        ("writer", {"batch_size": None}, r"key 'batch_size' is null; expected an integer"),
        (
            "embedding",
            {"meta_fields_to_embed": "title"},
            r"key 'meta_fields_to_embed' is 'title' \(a string\); expected a list of strings",
        ),
        (
            "store",
            {"type": "elasticsearch", "request_timeout": "slow"},
            r"key 'request_timeout' is 'slow' \(a string\); expected a number",
        ),
        ("store", {"type": "in_memory", "bm25_k1": "high"}, r"key 'bm25_k1' is 'high' \(a string\); expected a number"),
    ],
)
def test_index_config_values_are_type_checked_with_key_value_and_type(section, values, message):
    config = sample_config(**{section: values})
    with pytest.raises(ConfigError, match=message):
        index_config_from_dict(config)


def test_numbers_are_not_coerced_but_a_yaml_float_in_e_notation_is_a_number():
    config = index_config_from_dict(sample_config(store={"type": "elasticsearch", "request_timeout": "1e2"}))
    assert config.store.request_timeout == 100.0
    assert index_config_from_dict(sample_config(embedding={"enabled": False})).embedding.enabled is False


def test_a_config_without_store_or_corpus_is_refused_not_the_sample_silently(tmp_path):
    with pytest.raises(ConfigError, match=r"no 'store' or 'corpus' section"):
        index_config_from_dict({"name": "x", "embedding": {"enabled": False}})
    with pytest.raises(ConfigError, match=r"no 'corpus' section"):
        index_config_from_dict({"store": {"type": "in_memory"}})
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing here\n")
    with pytest.raises(ConfigError, match="is empty"):
        load_index_config(path)


def test_a_yaml_syntax_error_in_an_index_config_names_the_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("store:\n  type: in_memory\ncorpus: [path: sample\n")
    with pytest.raises(ConfigError, match=r"broken.yaml: not valid YAML at line \d+, column \d+"):
        load_index_config(path)


def test_training_recipe_values_are_type_checked(tmp_path):
    from icr2_components.training.recipe import RecipeError, load_recipe

    recipe = yaml.safe_load((REPO / "training" / "smollm2_cpu_rta.yaml").read_text())
    recipe["training"]["bf16"] = "false"
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(RecipeError, match=r"section training: key 'bf16' is 'false' \(a string\); expected a boolean"):
        load_recipe(path)
    recipe["training"]["bf16"] = False
    recipe["training"]["max_steps"] = 2.5
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(RecipeError, match=r"key 'max_steps' is 2.5 \(a number\); expected an integer"):
        load_recipe(path)
    recipe["training"]["max_steps"] = 2
    recipe["model"] = 135
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(RecipeError, match=r"key 'model' is 135 \(an integer\); expected a string"):
        load_recipe(path)


def test_gate_eval_records_with_a_string_label_or_a_number_answer_are_skipped_and_counted(tmp_path):
    from icr2_components.evaluation.gates.gate_eval import read_retrievalqa_jsonl

    path = tmp_path / "gate.jsonl"
    rows = [
        {"question": "Who won?", "ground_truth": ["Alice"], "needs_retrieval": True},
        {"question": "Is it raining?", "ground_truth": ["no"], "needs_retrieval": "false"},
        {"question": "How many?", "ground_truth": 8, "needs_retrieval": False},
        {"question": "Capital of France?", "ground_truth": "Paris", "param_knowledge_answerable": 1},
        {"question": "Odd label?", "ground_truth": ["x"], "param_knowledge_answerable": "yes"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    records, skips = read_retrievalqa_jsonl(path)
    assert [(r.question, r.needs_retrieval) for r in records] == [("Who won?", True), ("Capital of France?", False)]
    assert skips.counts == {"wrongly typed field": 3}
    examples = skips.examples["wrongly typed field"]
    assert examples[0] == "line 2: needs_retrieval is 'false' (a string); expected a boolean (true or false) or null."
    assert examples[1].startswith("line 3: ground_truth is 8 (an integer); expected a string or a list of strings")
    assert examples[2].startswith("line 5: param_knowledge_answerable is 'yes' (a string)")


def test_icr2_benchmark_records_with_wrong_types_are_counted(tmp_path):
    from icr2_components.kilt.icr2_benchmark import read_icr2_benchmark

    good = {"id": "q1", "query": "who?", "answers": ["A"], "task_type": "qa",
            "context": [{"passage_id": "p1", "doc_id": "d1", "text": "A did it"}], "gold_passage_ids": ["p1"]}
    bad = dict(good, id="q2", answers="A")
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    skips = SkipReport(source=str(path))
    assert [i.id for i in read_icr2_benchmark(path, skips=skips)] == ["q1"]
    assert skips.counts == {"wrongly typed field": 1}
    assert "answers is 'A' (a string); expected a list of strings" in skips.examples["wrongly typed field"][0]


def test_check_type_accepts_unions_and_literals():
    assert check_type(None, int | None, "k") is None
    assert check_type(3, int | None, "k") == 3
    with pytest.raises(TypeCheckError, match=r"k is 3.5 \(a number\); expected an integer or null"):
        check_type(3.5, int | None, "k")


# -- empty corpora and indexes --------------------------------------------------------------------------------


def test_an_empty_corpus_is_an_error_before_anything_is_saved(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    persist = tmp_path / "index.json"
    config = index_config_from_dict({"name": "e", "store": {"type": "in_memory", "persist_path": str(persist)},
                                     "corpus": {"path": str(empty)}, "embedding": {"enabled": False}})
    with pytest.raises(
        EmptyCorpusError, match=r"empty.jsonl yielded no passage \(.*nothing skipped\); nothing was indexed"
    ):
        IndexHandle(config).build(progress=False)
    assert not persist.exists()
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n{}\n")
    config = index_config_from_dict({"name": "j", "store": {"type": "in_memory", "persist_path": str(persist)},
                                     "corpus": {"path": str(junk)}, "embedding": {"enabled": False}})
    with pytest.raises(EmptyCorpusError, match=r"skipped 2 \(1 malformed JSON, 1 missing fields\)"):
        IndexHandle(config).build(progress=False)


def test_dense_and_bm25_search_on_an_empty_index_say_so(tmp_path, minilm):
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    persist = tmp_path / "index.json"
    config = index_config_from_dict({"name": "empty", "store": {"type": "in_memory", "persist_path": str(persist)},
                                     "corpus": {"path": "sample"}})
    handle = IndexHandle(config)
    # an index file of this config holding nothing (emptied by some other tool)
    InMemoryDocumentStore(index=handle.backend.index_name).save_to_disk(str(persist))
    for method in ("dense", "bm25", "hybrid"):
        with pytest.raises(EmptyIndexError, match="holds no passages"):
            handle.retrieve("who won the nobel prize", method=method)


def test_index_cli_refuses_a_typed_config_error_in_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nstore: {type: in_memory}\ncorpus: {path: sample}\nembedding: {enabled: 'false'}\n")
    result = subprocess.run([sys.executable, "-m", "icr2_components.cli", "index", "--config", str(path)],
                            capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "key 'enabled' is 'false' (a string); expected a boolean" in lines[0]
