"""Every example script runs in a subprocess, exits 0 and prints what its docstring documents: the first NQ
question of the bundled sample, the answer of the named pipeline YAML with the named token budget (the same
answer that pipeline gives in this process), and the question's gold answers."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))


def test_there_is_an_example_per_technique():
    assert {"closed_book.py", "vanilla_rag.py", "corpus_in_context.py", "reordered.py", "query_aware.py",
            "reranked.py", "adaptive_rag.py", "oracle.py", "rap.py"} <= set(EXAMPLES)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_and_prints_an_answer(name, sample_files):
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    result = subprocess.run([sys.executable, str(ROOT / "examples" / name)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    answers = [line for line in result.stdout.splitlines() if line.startswith("answer: ")]
    assert len(answers) == 1 and answers[0][len("answer: "):].strip(), result.stdout
    assert any(line.startswith("question: ") for line in result.stdout.splitlines())
    check_documented_output(name, result.stdout, sample_files)


def _first_answered_question(tasks_path):
    """The first NQ record of the sample with an answer, read straight from the KILT JSONL."""
    with open(tasks_path, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            answers = list(dict.fromkeys(o["answer"] for o in record["output"] if o.get("answer")))
            if answers:
                return record["input"], answers
    raise AssertionError(f"{tasks_path} has no answered question")


def check_documented_output(name, stdout, sample_files):
    from icr2_components.pipeline_spec import PipelineSpec

    docstring = ast.get_docstring(ast.parse((ROOT / "examples" / name).read_text()))
    assert "first NQ question of the bundled sample" in docstring, name
    pipeline_file = re.search(r"pipelines/[\w.]+\.yaml", docstring).group(0)
    tokens = int(re.search(r"(\d+) new tokens", docstring).group(1))
    lines = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in stdout.splitlines() if ": " in line}
    question, answers = _first_answered_question(sample_files.tasks)
    assert lines["question"] == question
    assert lines["gold"].startswith(" | ".join(answers[:3]) + "  (")
    documents = None
    if "given its gold passages" in docstring:
        from icr2_components.kilt.questions import read_compare_questions

        first = read_compare_questions(None, limit=1)[0][0]
        assert first.query == question and first.answers[:3] == answers[:3]
        documents = first.gold_documents
        assert int(lines["gold passages"]) == len(documents) >= 1
    cwd = os.getcwd()
    os.chdir(ROOT)  # the index path in the YAML is relative to the repository, as the example is run
    try:
        expected = PipelineSpec.from_file(pipeline_file).run(
            question, documents, controlled=False, max_new_tokens=tokens
        )
    finally:
        os.chdir(cwd)
    assert lines["answer"] == expected["answer"], (name, pipeline_file, tokens)
