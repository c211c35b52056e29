"""Strict tables and checked paths, on real files made at test time: a CSV with an unclosed quote, a repeated
header or a broken JSON list of answers gives a named error or a named skip with every other row read (the rows
are counted); typed Parquet cells stay what they are (the gold year ``1969`` is not ``'1969.0'``); a folder of
Parquet files with one of another schema reads the others; every skip is named in the run's skip file (all of
them, not the first five); and the ``icr2`` command refuses a bad path or device in one line before any work
(a FIFO where a file belongs, an output that is a file or under /proc, a binary id file, CUDA on a machine
without it), without a traceback and without hanging."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import os
import sys
import threading
from pathlib import Path

import pytest
import yaml

from icr2_components.cli import main
from icr2_components.corpora import corpus_reader, corpus_settings_from_mapping
from icr2_components.errors import ConfigError
from icr2_components.kilt.question_sets import QuestionSet, QuestionSetError, read_question_rows
from icr2_components.records import CorpusReadError, SkipReport
from icr2_components.records.csv_rows import csv_records
from icr2_components.records.reading import iter_jsonl
from icr2_components.records.skips import skip_file

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "dpr-wiki-sample-1000.jsonl"


def dpr_rows(n: int = 20) -> list[dict]:
    """Real DPR passages as table rows: doc_id, name, body (bodies hold commas and quotes of their own)."""
    rows = []
    with open(DATA, encoding="utf-8") as handle:
        for line in handle:
            if len(rows) == n:
                break
            record = json.loads(line)
            title, _, text = record["contents"].partition("\n")
            rows.append({"doc_id": f"dpr-{record['id']}", "name": title.strip('"'), "body": text})
    return rows


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([header, *rows])
    return path


def csv_corpus(path: Path) -> object:
    settings = corpus_settings_from_mapping({"format": "csv", "path": str(path), "count_tokens_for": [],
                                             "fields": {"id": "doc_id", "title": "name", "text": "body"}}, "test")
    return corpus_reader(settings)


# ------------------------------------------------------------------------------------------------ CSV


@pytest.mark.unit
def test_an_unclosed_quote_in_row_4_of_20_skips_that_row_by_name_and_reads_the_other_19(tmp_path):
    rows = dpr_rows(20)
    path = write_csv(tmp_path / "passages.csv", ["doc_id", "name", "body"],
                     [[r["doc_id"], r["name"], r["body"]] for r in rows])
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) == 21  # one line a row: the bodies hold no line break
    # row 4 (line 5): its body opens a quote and never closes it, the way a hand-edited file goes wrong
    start = io.StringIO()
    csv.writer(start).writerow([rows[3]["doc_id"], rows[3]["name"]])
    lines[4] = start.getvalue().rstrip("\r\n") + ',"' + rows[3]["body"].replace('"', '""') + "\n"
    path.write_text("".join(lines), encoding="utf-8")

    reader = csv_corpus(path)
    documents = list(reader.documents())
    assert len(documents) == 19
    kept = [r for i, r in enumerate(rows) if i != 3]
    assert [d.id for d in documents] == [r["doc_id"] for r in kept]
    assert [d.content for d in documents] == [r["body"] for r in kept]  # no row swallowed into another's text
    assert [d.meta["title"] for d in documents] == [r["name"] for r in kept]
    assert dict(reader.skips.counts) == {"unclosed quote": 1}
    (entry,) = reader.skips.entries()
    assert entry["line"] == 5 and "line 5" in entry["detail"]


@pytest.mark.unit
def test_an_unclosed_quote_closed_by_a_later_quoted_row_is_found_too(tmp_path):
    """Every field quoted (csv.QUOTE_ALL): the runaway quote ends at the next row's first quote, where the strict
    parser stops; the row is skipped and the rows it took are read."""
    rows = dpr_rows(8)
    path = tmp_path / "quoted.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(
            [["doc_id", "name", "body"], *([r["doc_id"], r["name"], r["body"]] for r in rows)])
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = lines[2].rstrip("\n").removesuffix('"') + "\n"  # row 2's body loses its closing quote
    path.write_text("".join(lines), encoding="utf-8")
    reader = csv_corpus(path)
    documents = list(reader.documents())
    assert [d.id for d in documents] == [r["doc_id"] for i, r in enumerate(rows) if i != 1]
    assert [d.content for d in documents] == [r["body"] for i, r in enumerate(rows) if i != 1]
    assert dict(reader.skips.counts) == {"unclosed quote": 1}
    assert reader.skips.examples["unclosed quote"][0].startswith("line 3")
    # on the last line, with no line after it: the same reason
    path.write_text("".join(lines[:-1]) + lines[-1].rstrip("\n").removesuffix('"'), encoding="utf-8")
    reader = csv_corpus(path)
    assert len(list(reader.documents())) == len(rows) - 2
    assert dict(reader.skips.counts) == {"unclosed quote": 2}
    assert reader.skips.examples["unclosed quote"][1].startswith(f"line {len(lines)}")


@pytest.mark.unit
def test_quoted_line_breaks_in_a_cell_are_one_row_not_an_unclosed_quote(tmp_path):
    rows = dpr_rows(3)
    rows[1]["body"] = rows[1]["body"] + '\n\nA second paragraph, with "quotes", and commas.\n'
    path = write_csv(tmp_path / "paragraphs.csv", ["doc_id", "name", "body"],
                     [[r["doc_id"], r["name"], r["body"]] for r in rows])
    reader = csv_corpus(path)
    assert [d.content for d in reader.documents()] == [r["body"] for r in rows]
    assert reader.skips.total == 0


@pytest.mark.unit
def test_a_header_naming_a_column_twice_is_an_error_naming_it_in_both_table_readers(tmp_path):
    rows = dpr_rows(3)
    path = write_csv(tmp_path / "twice.csv", ["doc_id", "body", "name", "body"],
                     [[r["doc_id"], r["body"], r["name"], "other"] for r in rows])
    with pytest.raises(ConfigError, match=r"twice.csv: the header names column 'body' 2 times \(columns 2, 4\)"):
        list(csv_corpus(path).documents())
    # columns without a name (a spreadsheet's trailing empty columns) are no repeated name
    unnamed = write_csv(tmp_path / "unnamed.csv", ["doc_id", "name", "body", "", ""],
                        [[r["doc_id"], r["name"], r["body"], "", ""] for r in rows])
    assert [d.id for d in csv_corpus(unnamed).documents()] == [r["doc_id"] for r in rows]
    questions = write_csv(tmp_path / "questions.csv", ["question", "answers", "answers"], [["Who?", "a", "b"]])
    with pytest.raises(QuestionSetError, match=r"the header names column 'answers' 2 times"):
        read_question_rows(QuestionSet.from_options(questions))


@pytest.mark.unit
def test_one_csv_reader_serves_corpora_and_question_sets(tmp_path):
    """The question-set reader is the corpus reader: an unclosed quote in a question set is the same named skip."""
    path = tmp_path / "questions.csv"
    path.write_text('question,answers\nWho wrote Hamlet?,Shakespeare\n"Who painted the Mona Lisa?,Leonardo\n'
                    "Which element has the symbol Fe?,iron\nWhat year did Apollo 11 land?,1969\n", encoding="utf-8")
    rows, skips = read_question_rows(QuestionSet.from_options(path))
    assert [(r.question, r.answers) for r in rows] == [
        ("Who wrote Hamlet?", ["Shakespeare"]), ("Which element has the symbol Fe?", ["iron"]),
        ("What year did Apollo 11 land?", ["1969"])]
    assert dict(skips.counts) == {"unclosed quote": 1}
    assert skips.examples["unclosed quote"][0].startswith("line 3")
    # the same rows through the reader both share
    shared = SkipReport()
    assert [line for line, _ in csv_records(path, shared)] == [2, 4, 5] and dict(shared.counts) == dict(skips.counts)


@pytest.mark.unit
def test_an_answers_cell_holding_a_broken_json_list_is_a_named_skip_not_the_gold_answer(tmp_path):
    path = write_csv(tmp_path / "gold.csv", ["id", "question", "answers"], [
        ["q1", "Who wrote Hamlet?", '["Shakespeare", "William Shakespeare"]'],
        ["q2", "Who painted the Mona Lisa?", '["Leonardo", "da Vinci"'],  # the closing bracket lost
        ["q3", "Which element has the symbol Fe?", "iron|Fe"],
        ["q4", "What year did Apollo 11 land?", "[1969]"],
        ["q5", "What is the capital of France?", '["Paris"'],
    ])
    rows, skips = read_question_rows(QuestionSet.from_options(path))
    assert [(r.id, r.answers) for r in rows] == [("q1", ["Shakespeare", "William Shakespeare"]),
                                                  ("q3", ["iron", "Fe"]), ("q4", ["1969"])]
    assert dict(skips.counts) == {"bad answers": 2}
    first, second = skips.examples["bad answers"]
    assert first.startswith("line 3") and "looks like a JSON list but is not one" in first
    assert second.startswith("line 6")


# ------------------------------------------------------------------------------------------------ Parquet


@pytest.mark.unit
def test_parquet_typed_gold_an_integer_column_with_a_null_stays_1969(tmp_path):
    pa = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    pandas = pytest.importorskip("pandas")
    # as pandas writes an integer column with a missing value: float64, 1969.0
    frame = pandas.DataFrame({"question": ["What year did Apollo 11 land?", "How many moons has Mars?",
                                           "What is pi to two places?", "Who wrote Hamlet?"],
                              "answers": [1969, 2, 3.14, None], "id": [1, 2, 3, None]})
    assert str(frame["answers"].dtype) == "float64"
    frame.to_parquet(tmp_path / "floats.parquet")
    rows, skips = read_question_rows(QuestionSet.from_options(tmp_path / "floats.parquet"))
    assert [(r.id, r.answers) for r in rows[:3]] == [("1", ["1969"]), ("2", ["2"]), ("3", ["3.14"])]
    assert rows[3].answers == [] and rows[3].derived_id and skips.total == 0
    # read through pyarrow's types: an int64 column with a null stays integers
    table = pa.table({"question": ["What year did Apollo 11 land?", "Who wrote Hamlet?"],
                      "answers": pa.array([1969, None], pa.int64())})
    parquet.write_table(table, tmp_path / "ints.parquet")
    rows, _ = read_question_rows(QuestionSet.from_options(tmp_path / "ints.parquet"))
    assert [r.answers for r in rows] == [["1969"], []]


@pytest.mark.unit
def test_parquet_corpus_keeps_types_a_float_id_is_the_integer(tmp_path):
    pandas = pytest.importorskip("pandas")
    rows = dpr_rows(4)
    frame = pandas.DataFrame({"doc_id": [7, 8, None, 10], "name": [r["name"] for r in rows],
                              "body": [r["body"] for r in rows], "year": [1969, 1970, 1971, 1972]})
    frame.to_parquet(tmp_path / "corpus.parquet")
    settings = corpus_settings_from_mapping({"format": "parquet", "path": str(tmp_path / "corpus.parquet"),
                                             "count_tokens_for": [],
                                             "fields": {"id": "doc_id", "title": "name", "text": "body",
                                                        "meta": ["year"]}}, "test")
    reader = corpus_reader(settings)
    documents = list(reader.documents())
    assert [d.id for d in documents] == ["7", "8", "10"]
    assert [d.meta["year"] for d in documents] == [1969, 1970, 1972]
    assert all(isinstance(d.meta["year"], int) for d in documents)
    assert dict(reader.skips.counts) == {"missing id field": 1}


@pytest.mark.unit
def test_a_parquet_file_of_another_schema_in_a_folder_is_named_and_the_others_read(tmp_path):
    pa = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    rows = dpr_rows(9)
    folder = tmp_path / "parts"
    folder.mkdir()
    for part, chunk in enumerate((rows[:4], rows[4:9])):
        parquet.write_table(pa.table({"doc_id": [r["doc_id"] for r in chunk], "name": [r["name"] for r in chunk],
                                      "body": [r["body"] for r in chunk]}), folder / f"part-{part}.parquet")
    parquet.write_table(pa.table({"question": ["Who wrote Hamlet?"], "answers": [["Shakespeare"]]}),
                        folder / "part-1b-questions.parquet")
    settings = corpus_settings_from_mapping({"format": "parquet", "path": str(folder), "count_tokens_for": [],
                                             "fields": {"id": "doc_id", "title": "name", "text": "body"}}, "test")
    reader = corpus_reader(settings)
    assert [d.id for d in reader.documents()] == [r["doc_id"] for r in rows]
    assert dict(reader.skips.counts) == {"Parquet file of another schema": 1}
    (entry,) = reader.skips.entries()
    assert entry["detail"].startswith("part-1b-questions.parquet: columns ['question', 'answers']")
    # a folder where no file has the mapped columns: the mapping is wrong, an error naming the columns
    other = tmp_path / "others"
    other.mkdir()
    (folder / "part-1b-questions.parquet").rename(other / "q.parquet")
    settings = corpus_settings_from_mapping({"format": "parquet", "path": str(other), "count_tokens_for": []}, "t")
    with pytest.raises(ConfigError, match=r"q.parquet has no column 'id', 'text'"):
        list(corpus_reader(settings).documents())


# ------------------------------------------------------------------------------------------------ skips


@pytest.mark.unit
def test_the_skip_file_names_every_skip_not_the_first_five(tmp_path, capsys, caplog):
    rows = dpr_rows(20)
    table = [[r["doc_id"], r["name"], r["body"]] for r in rows]
    for i in range(2, 18, 2):  # eight rows with one cell too few
        table[i] = table[i][:2]
    path = write_csv(tmp_path / "passages.csv", ["doc_id", "name", "body"], table)
    config = tmp_path / "csv.yaml"
    config.write_text(yaml.safe_dump({
        "name": "strict-csv", "store": {"type": "in_memory", "persist_path": str(tmp_path / "store.json")},
        "corpus": {"format": "csv", "path": str(path), "count_tokens_for": [],
                   "fields": {"id": "doc_id", "title": "name", "text": "body"}},
        "embedding": {"enabled": False}}))
    report = tmp_path / "report.json"
    with caplog.at_level(logging.WARNING, logger="icr2_components.records.skips"):
        assert main(["index", "--config", str(config), "--report", str(report), "--no-progress"]) == 0
    counted = json.loads(report.read_text())["skips"]
    assert counted["counts"] == {"row does not match the header": 8}
    assert len(counted["examples"]["row does not match the header"]) == 5  # the report keeps the first few
    skip_path = tmp_path / "report.skips.jsonl"
    entries = [json.loads(line) for line in skip_path.read_text(encoding="utf-8").splitlines()]
    assert [e["line"] for e in entries] == [i + 2 for i in range(2, 18, 2)]  # all eight, by their lines
    assert {e["reason"] for e in entries} == {"row does not match the header"}
    assert all(e["source"] == str(path) for e in entries)
    err = capsys.readouterr().err
    assert f"skipped 8 input(s) (8 row does not match the header); every one is named in {skip_path}" in err
    shown = [r.getMessage() for r in caplog.records if "skipped line" in r.getMessage()]
    assert len(shown) == 5  # the console shows the first few
    # the next run into the same report skips nothing: its skip file says so, not the last run's skips
    write_csv(path, ["doc_id", "name", "body"], [[r["doc_id"], r["name"], r["body"]] for r in rows])
    assert main(["index", "--config", str(config), "--report", str(report), "--no-progress"]) == 0
    assert skip_path.read_text(encoding="utf-8") == ""
    assert "skipped" not in capsys.readouterr().err


@pytest.mark.unit
def test_skip_reports_keep_every_skip_and_a_skip_file_writes_each_once(tmp_path):
    with skip_file(tmp_path / "skips.jsonl") as log:
        first = SkipReport(source="a.csv")
        for line in range(1, 13):
            first.skip("not UTF-8", line, "byte 0 is 0xff")
        again = SkipReport(source="a.csv")  # the same input read a second time
        for line in range(1, 13):
            again.skip("not UTF-8", line, "byte 0 is 0xff")
    assert [e["line"] for e in first.entries()] == list(range(1, 13))
    assert log.written == 12 and len((tmp_path / "skips.jsonl").read_text().splitlines()) == 12
    written = first.write_jsonl(tmp_path / "all.jsonl")
    assert len(written.read_text().splitlines()) == 12


# ------------------------------------------------------------------------------------------------ folders


@pytest.mark.unit
def test_folder_corpus_names_a_file_whose_name_is_not_utf8_and_a_fifo_and_reads_the_rest(tmp_path):
    rows = dpr_rows(4)
    folder = tmp_path / "docs"
    folder.mkdir()
    for i, row in enumerate(rows[:3]):
        (folder / f"doc{i}.txt").write_text(row["body"], encoding="utf-8")
    bad_name = os.fsencode(folder) + b"/caf\xe9.txt"  # a Latin-1 name, as an old archive unpacks
    with open(bad_name, "w", encoding="utf-8") as handle:
        handle.write(rows[3]["body"])
    os.mkfifo(folder / "pipe.txt")
    (folder / "tags.html").write_text("<html><head><title>T</title></head><body><div><span></span></div></body>"
                                      "</html>", encoding="utf-8")
    (folder / "tags.md").write_text("<div></div>\n<br/>\n", encoding="utf-8")
    settings = corpus_settings_from_mapping({"format": "folder", "path": str(folder), "count_tokens_for": []}, "t")
    reader = corpus_reader(settings)
    done: list = []
    worker = threading.Thread(target=lambda: done.append(list(reader.documents())), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "reading a folder with a FIFO in it hung"
    documents = done[0]
    assert sorted({d.meta["file_path"] for d in documents}) == ["doc0.txt", "doc1.txt", "doc2.txt"]
    for document in documents:
        document.id.encode("utf-8")  # every id can be stored (Elasticsearch refuses a lone surrogate)
    assert dict(reader.skips.counts) == {"file name is not UTF-8": 1, "not a regular file": 1, "empty text": 2}
    entries = {e["reason"]: e["detail"] for e in reader.skips.entries() if e["reason"] != "empty text"}
    assert entries["file name is not UTF-8"].startswith("caf\\xe9.txt")
    assert entries["not a regular file"] == "pipe.txt: a FIFO (named pipe)"
    # a file of tags only is "empty text" whichever converter reads it
    assert sorted(e["detail"] for e in reader.skips.entries() if e["reason"] == "empty text") == ["tags.html",
                                                                                                  "tags.md"]


# ------------------------------------------------------------------------------------------------ paths


def one_error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"icr2 {command}: error: "), lines[0]
    return lines[0]


@pytest.mark.unit
def test_paths_and_devices_refused_in_one_line_before_work(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("x\n")
    (tmp_path / "ids.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    cases = [
        (["compare", "--pipelines", "closed_book", "--out", "a-file"], "compare",
         "--out: a-file is a file, not a folder"),
        (["compare", "--pipelines", "closed_book", "--out", "/proc/icr2-out"], "compare",
         "--out: /proc/icr2-out is on the proc virtual filesystem"),
        (["compare", "--pipelines", "closed_book", "--question-ids", "ids.txt", "--out", "runs"], "compare",
         "--question-ids: ids.txt is a binary file (a NUL byte at byte 8), not text"),
        (["index", "--config", "missing.yaml", "--report", "/sys/icr2-report.json"], "index",
         "--report: /sys/icr2-report.json is on the sysfs virtual filesystem"),
        (["build-benchmark", "--tasks", "/dev/zero", "--out", "b.jsonl"], "build-benchmark",
         "--tasks: /dev/zero is a character device, not a regular file"),
        (["embed", "a-file", "--out", "a-file"], "embed", "--out: a-file is a file, not a folder"),
    ]
    for argv, command, expected in cases:
        assert main(argv) == 1, argv
        line = one_error_line(capsys, command)
        assert expected in line, line
    assert not (tmp_path / "runs").exists()  # nothing was started


@pytest.mark.unit
def test_a_cuda_device_on_a_machine_without_one_is_one_line_naming_the_devices_there(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    data = tmp_path / "questions.jsonl"
    data.write_text('{"question": "Who wrote Hamlet?", "ground_truth": ["Shakespeare"], "needs_retrieval": false, '
                    '"data_source": "test"}\n')
    assert main(["eval-gate", str(data), "--device", "cuda:0", "--decisions-only"]) == 1
    line = one_error_line(capsys, "eval-gate")
    assert "--device: device cuda:0 is not available on this machine (available: cpu" in line


@pytest.mark.unit
def test_a_fifo_given_as_a_question_set_is_refused_without_waiting(tmp_path, capsys):
    fifo = tmp_path / "questions.csv"
    os.mkfifo(fifo)
    codes: list = []
    worker = threading.Thread(target=lambda: codes.append(main(["compare", "--pipelines", "closed_book",
                                                                "--dataset", str(fifo), "--out",
                                                                str(tmp_path / "out")])), daemon=True)
    worker.start()
    worker.join(timeout=120)
    if worker.is_alive():  # release the reader before failing, so that the test process can end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("icr2 compare waited on a FIFO given as --dataset")
    assert codes == [1]
    assert f"--dataset: {fifo} is a FIFO (named pipe), not a regular file" in one_error_line(capsys, "compare")


@pytest.mark.unit
def test_library_readers_refuse_a_fifo_before_opening_it(tmp_path):
    """The JSON-lines reader, a question set and a corpus refuse a FIFO by name (opening it would wait)."""
    fifo = tmp_path / "data.jsonl"
    os.mkfifo(fifo)
    csv_settings = corpus_settings_from_mapping({"format": "csv", "path": str(fifo), "count_tokens_for": []}, "t")
    calls = [(lambda: list(iter_jsonl(fifo, SkipReport())), CorpusReadError),
             (lambda: QuestionSet.from_options(fifo), QuestionSetError),
             (lambda: list(corpus_reader(csv_settings).documents()), ConfigError)]
    for call, error in calls:
        raised: list = []

        def attempt(call=call, raised=raised) -> None:
            try:
                call()
            except Exception as caught:  # checked below
                raised.append(caught)

        worker = threading.Thread(target=attempt, daemon=True)
        worker.start()
        worker.join(timeout=60)
        if worker.is_alive():
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            pytest.fail(f"{call} waited on a FIFO")
        assert len(raised) == 1 and isinstance(raised[0], error), raised
        assert f"{fifo} is a FIFO (named pipe), not a regular file" in str(raised[0])


def test_a_fifo_as_corpus_path_is_one_line_from_the_real_command_within_a_time_limit(tmp_path):
    """The installed ``icr2`` in a subprocess: a corpus path that is a FIFO fails at once (it used to block)."""
    import subprocess

    fifo = tmp_path / "passages.jsonl"
    os.mkfifo(fifo)
    config = tmp_path / "fifo.yaml"
    config.write_text(yaml.safe_dump({
        "name": "fifo", "store": {"type": "in_memory", "persist_path": str(tmp_path / "store.json")},
        "corpus": {"format": "jsonl", "path": str(fifo), "count_tokens_for": []}, "embedding": {"enabled": False}}))
    icr2 = Path(sys.executable).parent / "icr2"
    command = [str(icr2)] if icr2.exists() else [sys.executable, "-m", "icr2_components.cli"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HAYSTACK_TELEMETRY_ENABLED": "False"}
    env.pop("ICR2_DEBUG", None)
    try:
        result = subprocess.run([*command, "index", "--config", str(config), "--no-progress"], env=env,
                                capture_output=True, text=True, timeout=300)
    finally:
        # a reader still waiting (the command hung and was killed) would leave nothing blocked
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert "Traceback" not in result.stderr and result.returncode == 1, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("icr2 index: error: corpus.path: ") and "is a FIFO (named pipe)" in line, line
