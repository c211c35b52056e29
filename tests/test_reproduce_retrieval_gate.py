"""``icr2 reproduce retrieval-gate``: RetrievalQA's gate evaluation end to end on the bundled reader in process (a
hand-written RetrievalQA-format file) and through the real llama.cpp server (the shipped held-apart set), the
refusals before any answer, and the paper's figures and prompts as printed.

Each run asserts what the report must hold: every method's retrieval rate and accuracy with Wilson intervals,
the accuracy recomputed from compare's answer cache and the decisions cache (the chosen answer's match), the
paper's Table 1 figures beside with its model named, the plot opened by the HTML, and a second run asking nothing
(answers and decisions from the caches)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import read_answer_records
from icr2_components.evaluation.experiments import get_experiment
from icr2_components.evaluation.experiments.retrieval_gate import CLOSED_BOOK_TEMPLATE, WITH_CONTEXT_TEMPLATE
from icr2_components.evaluation.metrics.answer_match import answer_match

REPO = Path(__file__).resolve().parents[1]

# hand-written: one question that needs retrieval (after SmolLM2's training), one it answers closed-book
QUESTIONS = [
    {"question": "Who became Prime Minister of Canada in March 2025?", "ground_truth": ["Mark Carney", "Carney"],
     "data_source": "new_world", "needs_retrieval": True,
     "context": ["Mark Carney was sworn in as Prime Minister of Canada in March 2025, succeeding Justin Trudeau."]},
    {"question": "What is the capital of France?", "ground_truth": ["Paris"], "data_source": "answerable",
     "param_knowledge_answerable": 1, "context": ["Paris is the capital and the largest city of France."]},
]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def _check_files(report: dict, out: Path) -> None:
    html = (out / "report.html").read_text()
    plot = Path(report["files"]["plot"])
    assert plot.is_file() and plot.stat().st_size > 10_000
    assert f"<img src='{plot.name}'" in html
    assert "GPT-3.5 (paper)" in html and "Self-RAG (7B) (paper)" in html


def _check_accuracy_from_caches(report: dict, out: Path) -> None:
    """Every method's accuracy is the mean match of the answer its decision picks (the cached answers and
    decisions, scored again here), and its retrieval rate the share of its retrieve decisions."""
    answers: dict[tuple[str, str], bool] = {}
    for record in read_answer_records(out / "compare" / "answers.jsonl"):
        answers[(record["pipeline"], record["question_id"])] = answer_match(record["answer"] or "", record["answers"])
    decisions = {(r["method"], r["question_id"]): r["retrieve"]
                 for r in read_answer_records(out / "gates" / "decisions.jsonl")}
    ids = report["questions"]["ids"]
    for name, entry in report["methods"].items():
        chosen = [answers[("with_context" if decisions[(name, q)] else "closed_book", q)] for q in ids]
        assert entry["accuracy"]["value"] == pytest.approx(sum(chosen) / len(ids))
        assert entry["retrieval_rate"]["value"] == pytest.approx(sum(decisions[(name, q)] for q in ids) / len(ids))
        low, high = entry["accuracy"]["ci95"]
        assert low <= entry["accuracy"]["value"] <= high


@pytest.mark.unit
def test_the_protocol_prints_the_papers_figures_and_prompts():
    from haystack import Document
    from haystack.components.builders import ChatPromptBuilder

    from icr2_components.evaluation.gates.gate_eval import closed_book_messages, context_messages

    protocol = get_experiment("retrieval-gate").describe()
    figures = {(f["model"], f["condition"]): (f["value"], f["source"]) for f in protocol["paper_figures"]}
    # Table 1: GPT-3.5 with TA-ARE retrieves for 86.3% of the questions that need it, match 35.8%
    assert figures[("GPT-3.5", "need:ta_are:retrieval_rate")] == (0.863, "Table 1")
    assert figures[("GPT-3.5", "need:ta_are:match")] == (0.358, "Table 1")
    assert figures[("Self-RAG (7B)", "need:threshold@0.5:retrieval_rate")] == (0.23, "Table 1")
    assert figures[("TinyLlama (1.1B)", "all:vanilla:f1")] == (0.485, "Table 10")
    assert protocol["conditions"] == ["always", "never", "vanilla", "ta_are", "threshold", "learned_knn"]
    assert {"questions", "methods", "need"} <= set(protocol["options"])
    # the reader's prompts are RetrievalQA's Fig. 7 and Fig. 8, as the project's labels were made
    question, passages = "Who won?", ["Title\nThe first passage.", "Other\nThe second one."]
    closed = ChatPromptBuilder(template=CLOSED_BOOK_TEMPLATE, required_variables=["query"]).run(query=question)
    with_context = ChatPromptBuilder(template=WITH_CONTEXT_TEMPLATE, required_variables=["query", "documents"]).run(
        query=question, documents=[Document(content=p) for p in passages])
    assert closed["prompt"][0].text == closed_book_messages(question)[0].text
    assert with_context["prompt"][0].text == context_messages(question, passages)[0].text


def test_what_cannot_run_is_refused_before_any_answer(tmp_path, capsys):
    out = str(tmp_path / "out")
    assert main(["reproduce", "retrieval-gate", "--set", "methods=always,learned", "--out", out]) == 1
    assert "learned needs its artifact" in capsys.readouterr().err
    assert main(["reproduce", "retrieval-gate", "--set", f"questions={tmp_path / 'none.jsonl'}", "--out", out]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["reproduce", "retrieval-gate", "--conditions", "ta_are", "--set", "methods=vanilla", "--out",
                 out]) == 1
    assert "--set methods" in capsys.readouterr().err
    unlabelled = _write(tmp_path / "unlabelled.jsonl", [{k: v for k, v in QUESTIONS[0].items()
                                                        if k != "needs_retrieval"}])
    assert main(["reproduce", "retrieval-gate", "--set", f"questions={unlabelled}", "--set", "need=file", "--out",
                 out]) == 1
    assert "carry no need label" in capsys.readouterr().err
    # a question the shipped learned gate was trained on (its id names the training file): refused, not scored
    trained = json.loads((REPO / "bench" / "data" / "gate_train_pool.jsonl").read_text().splitlines()[0])
    pool = _write(tmp_path / "gate_train_pool.jsonl", [trained])
    assert main(["reproduce", "retrieval-gate", "--set", f"questions={pool}", "--out", out]) == 1
    assert "used to train or calibrate" in capsys.readouterr().err
    assert not (tmp_path / "out" / "compare").exists()  # nothing was answered


@pytest.mark.slow  # 4 SmolLM2 answers and 2 x 2 gate decisions in process: about a minute on 2 idle cores
def test_in_process_on_a_retrievalqa_file_with_its_labels_and_resumes(tmp_path, capsys):
    questions = _write(tmp_path / "mine.jsonl", QUESTIONS)
    out = tmp_path / "gate"
    argv = ["reproduce", "retrieval-gate", "--set", f"questions={questions}", "--conditions", "ta_are,learned_knn",
            "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    report = _report(out)
    assert list(report["methods"]) == ["always", "ta_are", "learned_knn"]  # always added: the paired baseline
    assert report["questions"]["complete"] == 2
    # the file's labels (needs_retrieval, and RetrievalQA's param_knowledge_answerable read as its negation)
    assert report["labels"] == {**report["labels"], "source": "the file's", "needs_retrieval": 1, "no_need": 1}
    always = report["methods"]["always"]
    assert always["retrieval_rate"]["value"] == 1.0 and always["retrieval_rate"]["n"] == 2
    assert always["retrieval_accuracy"]["value"] == 0.5  # retrieving for both: right on the one that needs it
    _check_accuracy_from_caches(report, out)
    # TA-ARE is scored by P(yes): its trade-off curve and AUROC exist; the learned gate's too
    assert report["tradeoff"]["methods"]["ta_are"]["curve"] and not report["refused"]
    assert set(report["versus"]["always"]) == {"ta_are", "learned_knn"} and "always" in report["versus"]["ta_are"]
    assert report["run"]["counters"]["answers"]["model_runs"] == 4  # 2 questions, closed-book and with context
    assert "0.863 / 0.358" in printed and "not at the registered size" in printed  # Table 1, GPT-3.5's TA-ARE
    _check_files(report, out)
    # run again: every answer and every decision comes from the caches
    assert main(argv) == 0
    again = _report(out)
    assert again["run"]["counters"]["answers"]["model_runs"] == 0
    assert set(again["run"]["counters"]["gate_decisions_asked"].values()) == {0}
    assert again["methods"] == report["methods"]


@pytest.mark.llama_server
def test_through_the_llama_cpp_server_on_the_shipped_set(llama_cpp_backend, tmp_path):
    out = tmp_path / "gate"
    assert main(["reproduce", "retrieval-gate", "--backend", llama_cpp_backend, "--limit", "2", "--out", str(out),
                 "--no-progress", "--concurrency", "2"]) == 0
    report = _report(out)
    served = "smollm2-135m-instruct at http://127.0.0.1:"
    assert served in report["run"]["backend"] and served in report["run"]["gate_model"]  # reader and gates
    # the shipped held-apart set, in its order: the first held-out NQ ids with the index's passages
    assert report["run"]["drawn"]["source"] == "shipped held-apart gate set"
    assert report["questions"]["ids"] == ["nq-sample-01427", "nq-sample-01023"]
    assert list(report["methods"]) == ["always", "never", "vanilla", "ta_are", "threshold", "learned_knn"]
    # P(yes) from the server's top log-probabilities: every asking gate is scored, none parsed from a reply
    assert not report["refused"]
    assert all(report["tradeoff"]["methods"][m]["curve"] for m in ("vanilla", "ta_are", "threshold"))
    assert report["run"]["counters"]["answers"]["model_runs"] == 4
    assert report["labels"]["source"].startswith("this reader's")
    _check_accuracy_from_caches(report, out)
    _check_files(report, out)


def test_the_shipped_set_in_process_reuses_the_projects_labels_as_answers(tmp_path):
    """--set answers_from / decisions_from: the committed labels of the same reader, budget and passages stand for the
    answers (no model answers) and the committed eval-gate run's TA-ARE decisions for its decisions; the shipped
    set's first question, its passages retrieved from the sample index as labelled."""
    labels = REPO / "bench" / "results" / "gate_labels" / "heldout200_gate_eval.jsonl"
    decisions = REPO / "bench" / "results" / "gate_tradeoff" / "tradeoff.json"
    out = tmp_path / "gate"
    assert main(["reproduce", "retrieval-gate", "--limit", "1", "--conditions", "never,ta_are", "--set",
                 f"answers_from={labels}", "--set", f"decisions_from={decisions}", "--out", str(out),
                 "--no-progress"]) == 0
    report = _report(out)
    # TA-ARE's decision is the committed eval-gate run's (same model, date and pools): no gate was asked
    assert report["run"]["counters"]["gate_decisions_asked"] == {"always": 0, "never": 0, "ta_are": 0}
    row = json.loads(decisions.read_text())["rows"][0]
    assert report["methods"]["ta_are"]["retrieval_rate"]["value"] == float(row["ta_are retrieve"])
    seeded = report["run"]["answers_seeded"]
    assert seeded["seeded"] == 2 and seeded["other_passages"] == 0 and seeded["reader"].startswith("local:smollm2")
    assert report["run"]["counters"]["answers"]["model_runs"] == 0
    label = json.loads(labels.read_text().splitlines()[0])
    assert report["questions"]["ids"] == [label["id"]]
    assert report["methods"]["always"]["accuracy"]["value"] == float(label["context_match"])
    assert report["methods"]["never"]["accuracy"]["value"] == float(label["closed_book_match"])
    assert report["labels"]["source"].startswith("this reader's")
    _check_accuracy_from_caches(report, out)
