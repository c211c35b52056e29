"""The shipped Python-documentation question set (``icr2 compare --dataset python-docs``): every answer is checked
against the page the set names, in the text Haystack's ``HTMLToDocument`` makes of it (what the folder corpus
indexes), on Debian's python3-doc package as ``scripts/python_docs.sh`` unpacks it; and a question's gold source
becomes the passages of that page that hold its answer, in a real index of a few of the pages."""

import subprocess
from pathlib import Path

import pytest
import yaml

from icr2_components.kilt.question_sets import QuestionSet, read_question_rows
from icr2_components.kilt.questions import question_source, read_compare_questions
from icr2_components.resources import shipped_file
from icr2_components.text.normalization import normalize_text

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def python_docs_html() -> Path:
    """The python3-doc HTML folder, set up by the project's own script (downloaded once into the cache)."""
    result = subprocess.run(["bash", str(REPO / "scripts" / "python_docs.sh")], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"scripts/python_docs.sh failed:\n{result.stderr[-3000:]}"
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def rows():
    source = question_source("python-docs")
    assert isinstance(source, QuestionSet) and Path(source.path) == shipped_file("questions", "python-docs")
    found, skips = read_question_rows(source)
    assert skips.total == 0, skips.as_dict()
    return found


@pytest.mark.unit
def test_the_set_has_at_least_40_questions_each_with_answers_and_its_page(rows):
    assert len(rows) >= 40
    assert len({r.id for r in rows}) == len(rows) and len({r.question for r in rows}) == len(rows)
    for row in rows:
        assert row.answers and len(row.gold_sources) == 1 and row.gold_sources[0].endswith(".html"), row


def test_every_answer_occurs_in_its_page_text(rows, python_docs_html):
    from haystack.components.converters import HTMLToDocument

    converter = HTMLToDocument()
    pages = sorted({r.gold_sources[0] for r in rows})
    text = {page: converter.run(sources=[python_docs_html / page])["documents"][0].content for page in pages}
    missing = [(r.id, a, r.gold_sources[0]) for r in rows for a in r.answers if a not in text[r.gold_sources[0]]]
    assert not missing, missing


def test_gold_sources_become_the_answer_bearing_passages_of_the_page(rows, python_docs_html, tmp_path):
    """Three of the set's pages indexed (BM25 only, the shipped config's chunking): each question's gold passages
    are passages of its page that contain its answer, and a page not in the index leaves it without gold."""
    chosen = [r for r in rows if r.gold_sources[0] in ("library/functools.html", "library/heapq.html",
                                                        "library/uuid.html")]
    folder = tmp_path / "html"
    for page in {r.gold_sources[0] for r in chosen} - {"library/uuid.html"}:
        (folder / Path(page).parent).mkdir(parents=True, exist_ok=True)
        (folder / page).write_bytes((python_docs_html / page).read_bytes())
    config = yaml.safe_load(shipped_file("indexing", "python-docs").read_text())
    config.update(name="python-docs-question-test", embedding={"enabled": False})
    config["corpus"].update(path=str(folder), count_tokens_for=[])
    config["store"]["persist_path"] = str(tmp_path / "index.json")
    index = tmp_path / "python-docs-test.yaml"
    index.write_text(yaml.safe_dump(config))
    questions, skips, _ = read_compare_questions(question_source("python-docs"), index=str(index),
                                                 ids=[r.id for r in chosen])
    assert skips.total == 0 and [q.id for q in questions] == [r.id for r in chosen]
    for question in questions:
        page = next(r.gold_sources[0] for r in chosen if r.id == question.id)
        if page == "library/uuid.html":
            assert question.gold_documents == []
            continue
        assert question.gold_documents, question.id
        for document in question.gold_documents:
            assert document.meta["file_path"] == page
            assert any(normalize_text(a) in normalize_text(document.content) for a in question.answers)
