"""Question sets in users' formats (``kilt.question_sets``): JSON lines, CSV, Parquet and a ``datasets`` dataset saved
to disk, read through a field mapping, and ``icr2 compare`` on them with the real SmolLM2: every metric computed
where its inputs exist, and the report saying on how many questions and why not on the others.

The questions are real: the bundled NQ sample's (KILT file and index built from ../shared/data), written out in
each format under other field names, with their gold answers and the ids of their gold passages in the
kilt-sample index."""

import csv
import json
from pathlib import Path

import pytest

from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import read_answer_records
from icr2_components.evaluation.metrics.text_metrics import answer_scores
from icr2_components.kilt.question_sets import QuestionSet, QuestionSetError, derived_id, read_question_rows
from icr2_components.kilt.questions import dataset_question_ids, question_source

ANSWER_METRICS = ("exact_match", "answer_match", "token_f1", "rouge_l")
QUICK = ["--max-new-tokens", "3", "--no-progress"]


@pytest.fixture(scope="module")
def nq():
    """Five real NQ-sample questions with answers and gold passage ids (the kilt-sample index's passages)."""
    from icr2_components.kilt import build_sample
    from icr2_components.kilt.questions import read_kilt_questions
    from icr2_components.records import SkipReport

    ids = [f"nq-sample-0000{i}" for i in range(5)]  # no retrieval: gold passages from the sample's corpus file
    questions = read_kilt_questions(build_sample().tasks, SkipReport(), ids=ids, retrieve=lambda query: [])
    assert [q.id for q in questions] == ids and all(q.answers and q.gold_documents for q in questions)
    return questions


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n"
                            for r in records), encoding="utf-8")
    return path


# -- reading ---------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_jsonl_field_mapping_dotted_paths_derived_ids_and_bad_rows_counted(tmp_path, nq):
    q0, q1, q2 = nq[:3]
    path = write_jsonl(tmp_path / "set.jsonl", [
        {"text": q0.query, "gold": {"answers": q0.answers}, "passages": [d.id for d in q0.gold_documents]},
        {"text": q1.query},                                              # no answers: kept
        {"text": "   ", "gold": {"answers": ["x"]}},                     # missing question
        {"text": q2.query, "gold": {"answers": [{"a": 1}]}},             # bad answers
        "{not json",                                                     # unreadable line
        {"text": q0.query},                                              # same question: same derived id
        {"text": q2.query, "gold": {"answers": 1901}},                   # a number is an answer
    ])
    questions = QuestionSet.from_options(path, fields={"question": "text", "answers": "gold.answers",
                                                       "gold_passage_ids": "passages"})
    rows, skips = read_question_rows(questions)
    assert [r.question for r in rows] == [q0.query, q1.query, q2.query]
    assert rows[0].answers == q0.answers and rows[0].gold_passage_ids == [d.id for d in q0.gold_documents]
    assert rows[1].answers == [] and rows[2].answers == ["1901"]
    assert [r.id for r in rows] == [derived_id(q.query) for q in (q0, q1, q2)]
    assert rows[0].id.startswith("q-") and len(rows[0].id) == 14
    assert dict(skips.counts) == {"missing question": 1, "bad answers": 1, "malformed JSON": 1,
                                  "repeated question id": 1}
    assert "line 4" in skips.examples["bad answers"][0]


@pytest.mark.unit
def test_csv_lists_in_cells_short_rows_and_a_missing_column_named(tmp_path, nq):
    path = tmp_path / "set.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["qid", "q", "gold", "ids"])
        writer.writerow(["a", nq[0].query, " | ".join([*nq[0].answers, "Röntgen"]), nq[0].gold_documents[0].id])
        writer.writerow(["b", nq[1].query, json.dumps(nq[1].answers), ""])
        writer.writerow(["c", nq[2].query, "", "", "one cell too many"])
    questions = QuestionSet.from_options(path, fields={"id": "qid", "question": "q", "answers": "gold",
                                                       "gold_passage_ids": "ids"})
    assert questions.format == "csv"
    rows, skips = read_question_rows(questions)
    assert [(r.id, r.answers, r.gold_passage_ids) for r in rows] == [
        ("a", [*nq[0].answers, "Röntgen"], [nq[0].gold_documents[0].id]), ("b", nq[1].answers, [])]
    assert dict(skips.counts) == {"row does not match the header": 1}
    assert skips.examples["row does not match the header"][0].startswith("line 4")
    with pytest.raises(QuestionSetError, match=r"answers field is mapped to column 'answer'.*\['qid', 'q', 'gold'"):
        read_question_rows(QuestionSet.from_options(path, fields={"question": "q", "answers": "answer"}))
    with pytest.raises(QuestionSetError, match="no column 'question' holds the questions"):
        read_question_rows(QuestionSet.from_options(path))


@pytest.mark.unit
def test_parquet_columns_null_questions_counted(tmp_path, nq):
    parquet = pytest.importorskip("pyarrow.parquet")
    import pyarrow

    table = pyarrow.table({"question": [nq[0].query, None, nq[1].query],
                           "answers": [nq[0].answers, ["x"], []],
                           "gold_passage_ids": [[d.id for d in nq[0].gold_documents], [], None]})
    parquet.write_table(table, tmp_path / "set.parquet")
    source = question_source(str(tmp_path / "set.parquet"))
    assert isinstance(source, QuestionSet) and source.format == "parquet"
    rows, skips = read_question_rows(source)
    assert [(r.question, r.answers, r.gold_passage_ids) for r in rows] == [
        (nq[0].query, nq[0].answers, [d.id for d in nq[0].gold_documents]), (nq[1].query, [], [])]
    assert dict(skips.counts) == {"missing question": 1} and skips.examples["missing question"][0].startswith("line 2")


@pytest.mark.unit
def test_question_set_file_is_strict_and_relative_to_itself(tmp_path, nq):
    write_jsonl(tmp_path / "data.jsonl", [{"prompt": q.query, "gold": q.answers} for q in nq[:2]])
    config = tmp_path / "questions.yaml"
    config.write_text("path: data.jsonl\nformat: jsonl\nfields: {question: prompt, answers: gold}\n")
    source = question_source(str(config))
    assert isinstance(source, QuestionSet) and source.path == str(tmp_path / "data.jsonl")
    ids, skips, _ = dataset_question_ids(str(config))
    assert ids == [derived_id(q.query) for q in nq[:2]] and skips.total == 0
    config.write_text("path: data.jsonl\nfield: {question: prompt}\n")
    with pytest.raises(QuestionSetError, match=r"unknown key\(s\) \['field'\].*allowed keys"):
        question_source(str(config))
    config.write_text("path: data.jsonl\nlist_separator: 3\n")
    with pytest.raises(QuestionSetError, match="list_separator' is 3"):
        question_source(str(config))


def test_bad_question_set_options_are_one_line_errors(tmp_path, nq, capsys):
    path = write_jsonl(tmp_path / "set.jsonl", [{"question": nq[0].query}])
    for options, message in [
        (["--field", "answer=gold"], "Unknown question-set field(s) ['answer']; the fields are ['question', 'answers'"),
        (["--field", "answers"], "--field takes FIELD=COLUMN (e.g. --field answers=gold), got 'answers'."),
        (["--field", "question="], "The question field cannot be left out"),
        (["--dataset-format", "csv"], "no column 'question' holds the questions"),
    ]:
        assert main(["compare", "--pipelines", "closed_book", "--dataset", str(path), *options,
                     "--out", str(tmp_path / "out"), "--no-progress"]) == 1
        printed = capsys.readouterr().err
        assert message in printed and "Traceback" not in printed, printed
    assert main(["compare", "--pipelines", "closed_book", "--dataset", str(tmp_path / "nowhere.csv"),
                 "--out", str(tmp_path / "out")]) == 1
    assert "Dataset not found" in capsys.readouterr().err


def test_the_command_offers_exactly_the_formats_the_reader_reads():
    # the command keeps its own copy so that `icr2 --help` does not import the readers (and torch with them)
    from icr2_components.commands.compare import DATASET_FORMATS as offered
    from icr2_components.kilt.questions import DATASET_FORMATS as read

    assert offered == read


@pytest.mark.unit
def test_the_benchmark_formats_are_read_as_before(sample_files):
    """Auto-detection keeps a KILT task file a KILT file (a path, its own reader), and refuses mapping its fields."""
    assert question_source(str(sample_files.tasks)) == str(sample_files.tasks)
    with pytest.raises(ValueError, match="read as a KILT file, whose fields are fixed"):
        question_source(str(sample_files.tasks), fields={"question": "input"})


# -- compare ---------------------------------------------------------------------------------------------------


def test_compare_on_a_jsonl_set_without_answers_reports_each_metrics_n(tmp_path, nq, smollm2, capsys):
    path = write_jsonl(tmp_path / "no_answers.jsonl",
                       [{"question": q.query, "id": f"mine-{i}"} for i, q in enumerate(nq[:3])] + [{"id": "empty"}])
    out = tmp_path / "run"
    assert main(["compare", "--pipelines", "closed_book", "vanilla_rag", "--dataset", str(path),
                 "--context-types", "open,gold", "--out", str(out), *QUICK]) == 0
    report = json.loads((out / "report.json").read_text())
    run = report["run"]
    assert run["question_ids"] == ["mine-0", "mine-1", "mine-2"]
    assert run["dataset_skips"]["counts"] == {"missing question": 1}
    assert run["question_set"]["run_questions"] == {"questions": 3, "with_answers": 0, "with_gold_passages": 0,
                                                    "with_gold_sources": 0, "with_conflicting_answer": 0}
    assert run["missing_contexts"] == {"gold": {"no gold answers": 3}}
    records = read_answer_records(out / "answers.jsonl")
    assert len(records) == 6 and all(r["context_type"] == "open" and r["answers"] == [] for r in records)
    for name in ("closed_book", "vanilla_rag"):
        row = report["summary"][name]["open"]
        assert row["n"] == 3 and row["questions"] == 3
        for metric in ANSWER_METRICS:  # never a 0 scored against no answer
            assert row[metric] is None and row["intervals"][metric]["n"] == 0
            assert row["not_computed"][metric] == {"no gold answers": 3}
        assert row["intervals"]["latency_s"]["n"] == row["intervals"]["prompt_tokens"]["n"] == 3
        assert "latency_s" not in row["not_computed"]
        assert report["summary"][name]["gold"]["not_computed"]["latency_s"] == {"context not built: no gold answers": 3}
    rag = report["summary"]["vanilla_rag"]["open"]["not_computed"]["in_context_recall"]
    assert rag == {"no gold passage ids (in the index)": 3}
    markdown = (out / "report.md").read_text()
    assert "## Metric coverage" in markdown
    assert ("| open | exact_match, answer_match, token_f1, rouge_l, rouge_l_ragas | all | 0 of 3 | "
            "3: no gold answers |") in markdown
    assert "| gold | every metric | all | 0 of 3 | 3: context not built: no gold answers |" in markdown
    assert "<td>0 of 3</td><td>3: no gold answers</td>" in (out / "report.html").read_text()
    printed = capsys.readouterr().out
    assert "metrics computed on fewer than the run's questions" in printed and "no gold answers" in printed


def test_compare_from_csv_with_answers_gold_ids_and_a_conflicting_answer(tmp_path, nq, smollm2):
    """Three questions: one with everything (and its own conflicting answer), one without gold passage ids, one
    without answers: each metric's n and reasons follow, and the conflicting context uses the answer given."""
    q0, q1, q2 = nq[:3]
    path = tmp_path / "set.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question", "answers", "passages", "fake"])
        writer.writerow([q0.query, "|".join(q0.answers), "|".join(d.id for d in q0.gold_documents), "Marie Curie"])
        writer.writerow([q1.query, "|".join(q1.answers), "", ""])
        writer.writerow([q2.query, "", "", ""])
    out = tmp_path / "run"
    assert main(["compare", "--pipelines", "vanilla_rag", "--dataset", str(path),
                 "--field", "gold_passage_ids=passages", "--field", "conflicting_answer=fake",
                 "--context-types", "open,conflicting", "--out", str(out), *QUICK]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["question_set"]["format"] == "csv"
    assert report["run"]["question_set"]["run_questions"] == {"questions": 3, "with_answers": 2,
                                                              "with_gold_passages": 1, "with_gold_sources": 0,
                                                              "with_conflicting_answer": 1}
    assert report["run"]["missing_contexts"] == {"conflicting": {"no gold passage": 1, "no gold answers": 1}}
    records = read_answer_records(out / "answers.jsonl")
    conflicting = [r for r in records if r["context_type"] == "conflicting"]
    assert {r["question_id"] for r in conflicting} == {derived_id(q0.query)}
    assert {r["conflicting_answer"] for r in conflicting} == {"Marie Curie"}
    rag = report["summary"]["vanilla_rag"]["open"]
    mine = [r for r in records if r["pipeline"] == "vanilla_rag" and r["context_type"] == "open" and r["answers"]]
    assert rag["intervals"]["answer_match"]["n"] == 2
    assert rag["answer_match"] == pytest.approx(sum(answer_scores(r["answer"], r["answers"])["answer_match"]
                                                    for r in mine) / 2)
    assert rag["not_computed"]["answer_match"] == {"no gold answers": 1}
    assert rag["intervals"]["in_context_recall"]["n"] == 1
    assert rag["not_computed"]["in_context_recall"] == {"no gold passage ids (in the index)": 2}
    assert rag["intervals"]["latency_s"]["n"] == 3
    assert report["summary"]["vanilla_rag"]["conflicting"]["not_computed"]["bcu"] == {
        "context not built: no gold passage": 1, "context not built: no gold answers": 1}
    # the summary table says each metric's n where it is not the row's
    markdown = (out / "report.md").read_text()
    assert "n=2" in markdown.split("## Metric coverage")[0]
    assert "| open | in_context_recall | vanilla_rag | 1 of 3 | 2: no gold passage ids (in the index) |" in markdown
    assert "| conflicting | every metric | vanilla_rag | 0 of 3 |" not in markdown  # one answered: bcu n=1


def test_compare_on_a_saved_datasets_dataset_and_a_jsonl_set_with_answers(tmp_path, nq, smollm2):
    datasets = pytest.importorskip("datasets")
    rows = [{"query": q.query, "qid": q.id, "squad": {"text": q.answers, "answer_start": [0] * len(q.answers)}}
            for q in nq[3:5]]
    folder = tmp_path / "saved"
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(folder))
    out = tmp_path / "run"
    assert main(["compare", "--pipelines", "closed_book", "--dataset", str(folder), "--field", "question=query",
                 "--field", "id=qid", "--field", "answers=squad.text", "--context-types", "open",
                 "--out", str(out), *QUICK]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["question_set"]["format"] == "hf_dataset"
    assert report["run"]["question_ids"] == [q.id for q in nq[3:5]]
    row = report["summary"]["closed_book"]["open"]
    records = read_answer_records(out / "answers.jsonl")
    assert [r["answers"] for r in records] == [q.answers for q in nq[3:5]]
    assert row["intervals"]["answer_match"]["n"] == 2 and "answer_match" not in row["not_computed"]
    assert row["token_f1"] == pytest.approx(sum(answer_scores(r["answer"], r["answers"])["token_f1"]
                                                for r in records) / 2)
    # the same questions as JSON lines (default field names): the same answers from the cache, no model run
    path = write_jsonl(tmp_path / "with_answers.jsonl", [{"question": q.query, "id": q.id, "answers": q.answers}
                                                         for q in nq[3:5]])
    assert main(["compare", "--pipelines", "closed_book", "--dataset", str(path), "--context-types", "open",
                 "--out", str(out), *QUICK]) == 0
    again = json.loads((out / "report.json").read_text())
    assert again["run"]["counters"]["cached"] == 2 and again["run"]["counters"]["model_runs"] == 0
    assert again["summary"]["closed_book"]["open"]["token_f1"] == pytest.approx(row["token_f1"])
    assert again["run"]["question_set"]["format"] == "jsonl"
    # a DatasetDict of several splits needs one named
    datasets.DatasetDict({"a": datasets.Dataset.from_list(rows), "b": datasets.Dataset.from_list(rows)}).save_to_disk(
        str(tmp_path / "two"))
    with pytest.raises(QuestionSetError, match=r"splits \['a', 'b'\]; choose one with --dataset-split"):
        dataset_question_ids(QuestionSet.from_options(tmp_path / "two", fields={"question": "query"}))
