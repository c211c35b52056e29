"""Corpora in the formats users have, through `icr2 index`, into both stores: JSON lines, CSV, Parquet and a
`datasets` dataset saved to disk, each made at test time from real DPR Wikipedia passages
(../shared/data/dpr-wiki-sample-1000.jsonl) with renamed fields and a bad record of each kind; and indexes used
as they are (a Haystack InMemoryDocumentStore saved to disk, an Elasticsearch index filled by Haystack's
ElasticsearchDocumentStore). The folder format (real HTML and PDF files) is in test_corpus_formats_folder.py, the
resume after a kill in test_corpus_formats_resume.py."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from icr2_components.cli import main
from icr2_components.corpora import corpus_reader, corpus_settings_from_mapping
from icr2_components.corpora.reader import corpus_format_names
from icr2_components.errors import ConfigError
from icr2_components.stores import IndexHandle, index_config_from_dict, load_index_config, open_index

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "dpr-wiki-sample-1000.jsonl"
ROWS = 24


def dpr_rows(n: int = ROWS, start: int = 0) -> list[dict]:
    """Real DPR passages with the field names a user's table might have: doc_id, name, body, source, rank."""
    rows = []
    with open(DATA, encoding="utf-8") as handle:
        for i, line in enumerate(handle):
            if i < start:
                continue
            if len(rows) == n:
                break
            record = json.loads(line)
            title, _, text = record["contents"].partition("\n")
            rows.append({"doc_id": f"dpr-{record['id']}", "name": title.strip('"'), "body": text,
                         "source": "dpr-wiki", "rank": i})
    return rows


FIELDS = {"id": "doc_id", "title": "name", "text": "body", "meta": ["source", "rank"]}


def _config(tmp_path: Path, store: str, corpus: dict, name: str, url: str | None = None, index: str | None = None,
            embedding: bool = False) -> Path:
    if store == "elasticsearch":
        store_section = {"type": "elasticsearch", "hosts": url, "index": index, "max_retries": 1}
    else:
        store_section = {"type": "in_memory", "persist_path": str(tmp_path / f"{name}.json")}
    config = {"name": name, "store": store_section, "corpus": {**corpus, "count_tokens_for": []},
              "embedding": {"enabled": embedding},
              "writer": {"batch_size": 10, "checkpoint_path": str(tmp_path / f"{name}.ckpt.json")}}
    if store != "elasticsearch":
        config["writer"].pop("checkpoint_path")
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _index(config: Path, tmp_path: Path) -> dict:
    report = tmp_path / "report.json"
    assert main(["index", "--config", str(config), "--report", str(report), "--no-progress"]) == 0
    return json.loads(report.read_text())


@pytest.fixture(params=["in_memory", pytest.param("elasticsearch", marks=pytest.mark.elasticsearch)])
def store(request):
    """(store type, Elasticsearch URL, index name): each format goes into both stores."""
    if request.param == "elasticsearch":
        url = request.getfixturevalue("elasticsearch_url")
        return request.param, url, request.getfixturevalue("es_index_name")
    return request.param, None, None


def _check_index(config_path: Path, report: dict, rows: list[dict], skips: dict[str, int]) -> None:
    assert report["passages_streamed"] == len(rows) == report["documents_in_store"]
    assert report["count_ok"] is True and report["rejected"] == 0
    assert report["skips"]["counts"] == skips, report["skips"]
    handle = open_index(load_index_config(config_path))
    # BM25 over content and title finds a row by words of its title and text, its fields mapped
    target = rows[5]
    query = f"{target['name']} {' '.join(target['body'].split()[:12])}"
    found = handle.retrieve(query, method="bm25", top_k=3)
    assert found[0].id == target["doc_id"]
    assert found[0].content == target["body"]
    assert found[0].meta["title"] == target["name"]
    assert found[0].meta["source"] == "dpr-wiki" and found[0].meta["rank"] == target["rank"]
    # metadata fields filter as Haystack filters do
    filtered = handle.retrieve(f"{query} {rows[6]['name']}", method="bm25", top_k=3,
                               filters={"field": "meta.rank", "operator": "==", "value": rows[6]["rank"]})
    assert [d.id for d in filtered] == [rows[6]["doc_id"]]


# -- JSON lines -------------------------------------------------------------------------------------------------


def test_jsonl_with_mapped_fields_into_both_stores_counting_each_bad_line(tmp_path, store):
    rows = dpr_rows()
    lines = [json.dumps(row) for row in rows]
    lines.insert(3, '{"doc_id": "broken", "body": "cut short')              # malformed JSON
    lines.insert(7, json.dumps({"doc_id": "no-body", "name": "x"}))         # the text field missing
    lines.insert(9, json.dumps({"doc_id": "blank", "body": "  \n "}))      # empty text
    lines.insert(11, json.dumps({**rows[2], "body": "a repeat of an id"}))  # a repeated id: the first is kept
    lines.insert(12, json.dumps({"name": "no id", "body": "text without its id"}))
    corpus = tmp_path / "passages.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    kind, url, index = store
    config = _config(tmp_path, kind, {"format": "jsonl", "path": str(corpus), "fields": FIELDS}, "jsonl", url, index)
    report = _index(config, tmp_path)
    _check_index(config, report, rows, {"malformed JSON": 1, "missing text field": 1, "empty text": 1,
                                        "duplicate id (first record kept)": 1, "missing id field": 1})
    assert report["skips"]["examples"]["malformed JSON"][0].startswith("line 4")


# -- CSV ---------------------------------------------------------------------------------------------------------


def test_csv_into_both_stores_counting_rows_that_do_not_parse(tmp_path, store):
    rows = dpr_rows()
    corpus = tmp_path / "passages.csv"
    with open(corpus, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["doc_id", "name", "body", "source", "rank"])
        for i, row in enumerate(rows):
            writer.writerow([row[k] for k in ("doc_id", "name", "body", "source", "rank")])
            if i == 2:
                writer.writerow(["short-row", "only two fields"])            # does not match the header
            if i == 4:
                writer.writerow(["no-body", "a title", "", "dpr-wiki", "0"])   # empty cell: no text
            if i == 6:
                writer.writerow(["blank", "a title", "   ", "dpr-wiki", "0"])  # blank text
    with open(corpus, "ab") as handle:  # a row with bytes that are not UTF-8 (Latin-1 "café")
        handle.write(b"latin1,Caf\xe9,caf\xe9 au lait,dpr-wiki,0\r\n")
    kind, url, index = store
    config = _config(tmp_path, kind, {"format": "csv", "path": str(corpus), "fields": FIELDS}, "csv", url, index)
    report = _index(config, tmp_path)
    # CSV has no types: the rank is kept as the text it is
    for row in rows:
        row["rank"] = str(row["rank"])
    _check_index(config, report, rows, {"row does not match the header": 1, "missing text field": 1,
                                        "empty text": 1, "not UTF-8": 1})


# -- Parquet -----------------------------------------------------------------------------------------------------


def test_parquet_folder_into_both_stores_counting_null_text_and_a_corrupt_file(tmp_path, store):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = dpr_rows()
    folder = tmp_path / "parquet"
    folder.mkdir()
    first, second = rows[:10], rows[10:]
    pq.write_table(pa.Table.from_pylist([*first, {**rows[0], "doc_id": "null-body", "body": None}]),
                   folder / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist([*second, {**rows[0], "doc_id": "empty", "body": ""}]),
                   folder / "part-1.parquet", row_group_size=5)
    whole = (folder / "part-1.parquet").read_bytes()
    (folder / "part-2.parquet").write_bytes(whole[: len(whole) // 2])  # a file cut in half: unreadable
    kind, url, index = store
    config = _config(tmp_path, kind, {"format": "parquet", "path": str(folder), "fields": FIELDS}, "pq", url, index)
    report = _index(config, tmp_path)
    _check_index(config, report, rows, {"missing text field": 1, "empty text": 1, "unreadable file": 1})
    assert "part-2.parquet" in report["skips"]["examples"]["unreadable file"][0]


# -- a datasets dataset saved to disk -------------------------------------------------------------------------------


def test_saved_datasets_dataset_into_both_stores_streamed(tmp_path, store):
    import datasets

    rows = dpr_rows()
    bad = [{**rows[0], "doc_id": "null-body", "body": None}, {**rows[0], "doc_id": "blank", "body": " "}]
    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:12] + bad + rows[12:]),
                          "test": datasets.Dataset.from_list(rows[:2])}).save_to_disk(str(saved))
    kind, url, index = store
    corpus = {"format": "hf_dataset", "path": str(saved), "split": "train", "fields": FIELDS}
    config = _config(tmp_path, kind, corpus, "hf", url, index)
    report = _index(config, tmp_path)
    _check_index(config, report, rows, {"missing text field": 1, "empty text": 1})
    # a DatasetDict needs its split named
    with pytest.raises(ConfigError, match=r"splits \['train', 'test'\]: choose one with corpus.split"):
        list(corpus_reader(corpus_settings_from_mapping({**corpus, "split": None})).documents())


@pytest.mark.unit
def test_datasets_data_files_are_read_streamed_in_the_same_order_each_time(tmp_path):
    """Local data files through `load_dataset(..., streaming=True)`: an IterableDataset, no Arrow cache written."""
    rows = dpr_rows(30)
    files = tmp_path / "data"
    files.mkdir()
    for part in range(3):
        part_rows = rows[part * 10:(part + 1) * 10]
        (files / f"part-{part}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part_rows))
    settings = corpus_settings_from_mapping(
        {"format": "hf_dataset", "path": str(files / "*.jsonl"), "fields": FIELDS, "max_articles": 25,
         "chunking": {"split_by": "word", "split_length": 40, "split_overlap": 10}})
    reader = corpus_reader(settings)
    first = [(d.id, d.content) for d in reader.documents()]
    again = [(d.id, d.content) for d in reader.documents()]
    assert first == again and reader.records_read == 25
    assert first[0][0] == "dpr-0-word40o10-00000"
    # overlapping 40-word windows: each passage after the first of a record starts with the last 10 words before it
    same_record = [c for i, c in first if i.startswith("dpr-0-")]
    assert len(same_record) >= 3 and same_record[1].split()[:10] == same_record[0].split()[-10:]
    assert not list((tmp_path).rglob("*.arrow"))


# -- chunking is a setting, for KILT too ------------------------------------------------------------------------


@pytest.mark.unit
def test_kilt_chunking_is_a_setting_and_dpr_rule_stays_the_default(tmp_path):
    rows = dpr_rows(6)
    corpus = tmp_path / "kilt.jsonl"
    corpus.write_text("".join(json.dumps({"wikipedia_id": r["doc_id"], "wikipedia_title": r["name"],
                                          "text": [r["name"], *r["body"].split(". ")]}) + "\n" for r in rows))
    default = index_config_from_dict({"store": {"type": "in_memory"}, "corpus": {"path": str(corpus)}})
    dpr = list(corpus_reader(default.corpus).documents())
    assert dpr[0].id == "dpr-0-w100-00000" and "start_character" in dpr[0].meta
    per_paragraph = index_config_from_dict({"store": {"type": "in_memory"}, "corpus": {
        "path": str(corpus), "chunking": {"split_by": "passage", "split_length": 1}}})
    paragraphs = list(corpus_reader(per_paragraph.corpus).documents())
    expected = sum(len([p for p in r["body"].split(". ") if p.strip()]) for r in rows)
    assert len(paragraphs) == expected > len(dpr)
    assert paragraphs[1].id == "dpr-0-passage1o0-00001" and paragraphs[1].meta["wikipedia_id"] == "dpr-0"
    assert paragraphs[1].content.strip() == rows[0]["body"].split(". ")[1]
    with pytest.raises(ConfigError, match=r"passage_words is KILT/DPR's rule and corpus\.chunking replaces it"):
        index_config_from_dict({"store": {}, "corpus": {"path": str(corpus), "passage_words": 50,
                                                        "chunking": {"split_by": "word"}}})


@pytest.mark.unit
def test_config_errors_name_the_key_and_what_is_allowed(tmp_path):
    assert set(corpus_format_names()) >= {"kilt", "jsonl", "csv", "parquet", "hf_dataset", "folder", "existing"}
    store = {"type": "in_memory"}
    with pytest.raises(ConfigError, match=r"Unknown corpus format 'xlsx'; registered formats: csv, existing"):
        index_config_from_dict({"store": store, "corpus": {"format": "xlsx", "path": "a"}})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['delimiter'\] in section 'corpus' \(format jsonl\)"):
        index_config_from_dict({"store": store, "corpus": {"format": "jsonl", "path": "a", "delimiter": ";"}})
    with pytest.raises(ConfigError, match=r"corpus\.passage_words is the KILT format's"):
        index_config_from_dict({"store": store, "corpus": {"format": "csv", "path": "a", "passage_words": 80}})
    with pytest.raises(ConfigError, match="split_overlap must be >= 0 and below split_length"):
        index_config_from_dict({"store": store, "corpus": {"format": "jsonl", "path": "a", "chunking": {
            "split_length": 10, "split_overlap": 10}}})
    with pytest.raises(ConfigError, match=r"corpus\.fields\.meta names 'content'"):
        index_config_from_dict({"store": store, "corpus": {"format": "jsonl", "path": "a",
                                                           "fields": {"meta": ["content"]}}})
    table = tmp_path / "t.csv"
    table.write_text("key,passage\n1,some text\n")
    config = _config(tmp_path, "in_memory", {"format": "csv", "path": str(table)}, "nocol")
    with pytest.raises(ConfigError, match=r"has no column 'id', 'text' \(corpus.fields\); its columns are \['key', "):
        IndexHandle(load_index_config(config)).build(progress=False)


# -- an index used as it is -----------------------------------------------------------------------------------------


def test_a_saved_haystack_in_memory_store_is_used_as_it_is(tmp_path, capsys):
    from haystack import Document
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from icr2_components.retrievers import IndexRetriever

    rows = dpr_rows()
    theirs = InMemoryDocumentStore()
    theirs.write_documents([Document(id=r["doc_id"], content=r["body"], meta={"title": r["name"]}) for r in rows])
    saved = tmp_path / "their-store.json"
    theirs.save_to_disk(str(saved))
    before = saved.read_bytes()
    config = tmp_path / "existing.yaml"
    config.write_text(yaml.safe_dump({
        "name": "theirs", "store": {"type": "in_memory", "persist_path": str(saved)},
        "corpus": {"format": "existing", "count_tokens_for": []}, "embedding": {"enabled": False}}))
    report = _index(config, tmp_path)
    assert report["documents_in_store"] == ROWS and report["passages_streamed"] == 0
    assert report["details"]["used_as_is"] is True and report["details"]["sampled_with_title"] == 20
    assert saved.read_bytes() == before  # nothing written
    retriever = IndexRetriever(index=str(config), top_k=2, method="bm25")
    retriever.warm_up()
    target = rows[3]
    documents = retriever.run(query=f"{target['name']} {' '.join(target['body'].split()[:10])}")["documents"]
    assert documents[0].id == target["doc_id"]
    # a store without vectors is refused for dense retrieval by `icr2 index`'s check, naming the fix
    dense = yaml.safe_load(config.read_text())
    dense["embedding"] = {"enabled": True, "model": "all-minilm-l6-v2"}
    config.write_text(yaml.safe_dump(dense))
    assert main(["index", "--config", str(config), "--no-progress"]) == 1
    assert "have no embedding of dimension 384" in capsys.readouterr().err
    # without its persist_path there is nothing to use
    with pytest.raises(ConfigError, match=r"corpus\.format: existing with store\.type: in_memory needs store\.persist"):
        index_config_from_dict({"store": {"type": "in_memory"}, "corpus": {"format": "existing",
                                                                          "count_tokens_for": []}})


@pytest.mark.elasticsearch
def test_an_elasticsearch_index_filled_by_haystack_is_used_as_it_is_with_dense_retrieval(
        tmp_path, elasticsearch_url, es_client, es_index_name, minilm):
    from haystack import Document
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore

    rows = dpr_rows()
    vectors = minilm.encode([f"{r['name']}\n{r['body']}" for r in rows], normalize_embeddings=True)
    theirs = ElasticsearchDocumentStore(hosts=elasticsearch_url, index=es_index_name)
    theirs.write_documents([Document(id=r["doc_id"], content=r["body"], meta={"title": r["name"], "rank": r["rank"]},
                                     embedding=v.tolist()) for r, v in zip(rows, vectors, strict=True)])
    es_client.indices.refresh(index=es_index_name)
    config = tmp_path / "existing-es.yaml"
    config.write_text(yaml.safe_dump({
        "name": "theirs-es", "store": {"type": "elasticsearch", "hosts": elasticsearch_url, "index": es_index_name},
        "corpus": {"format": "existing", "count_tokens_for": []},
        "embedding": {"enabled": True, "model": "all-minilm-l6-v2"}}))
    report = _index(config, tmp_path)
    assert report["documents_in_store"] == ROWS and report["details"]["embedding_dimension"] == 384
    handle = open_index(load_index_config(config))
    target = rows[7]
    dense = handle.retrieve(f"{target['name']}: {' '.join(target['body'].split()[:20])}", method="dense", top_k=3)
    assert dense[0].id == target["doc_id"]
    hybrid = handle.retrieve(target["name"], method="hybrid", top_k=5)
    assert target["doc_id"] in [d.id for d in hybrid]
