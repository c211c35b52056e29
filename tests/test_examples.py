"""Every example script runs in a subprocess, exits 0 and prints a non-empty answer line."""

import os
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
