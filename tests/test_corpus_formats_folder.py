"""`corpus.format: folder` on real files, through `icr2 index`, into both stores: HTML pages of Debian's python3-doc
(unpacked by scripts/python_docs.sh, the set-up of the Python-documentation corpus), PDFs that Ghostscript writes
from that package's text sources (its own gslp.ps text printer: a real PDF writer, real text), one of those texts
as a .txt file and this checkout's README.md; with a PDF cut in half, a text file that is not UTF-8 and an empty
file, each counted."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from icr2_components.cli import main
from icr2_components.corpora import corpus_reader, corpus_settings_from_mapping
from icr2_components.errors import ConfigError
from icr2_components.stores import load_index_config, open_index

REPO = Path(__file__).resolve().parents[1]
HTML_PAGES = ["library/keyword.html", "library/getpass.html", "library/copy.html", "library/tty.html"]
PDF_SOURCES = ["library/colorsys.rst.txt", "library/fnmatch.rst.txt"]


@pytest.fixture(scope="session")
def python_docs_html() -> Path:
    """The python3-doc HTML folder, set up by the project's own script (downloaded once into the cache)."""
    result = subprocess.run(["bash", str(REPO / "scripts" / "python_docs.sh")], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"scripts/python_docs.sh failed:\n{result.stderr[-3000:]}"
    folder = Path(result.stdout.strip().splitlines()[-1])
    assert (folder / "index.html").exists() and (folder / "library" / "keyword.html").exists()
    return folder


def ghostscript_pdf(text_file: Path, pdf: Path) -> Path:
    """``text_file`` printed to ``pdf`` by Ghostscript (pdfwrite with its gslp.ps text printer)."""
    gs = shutil.which("gs")
    printers = sorted(glob.glob("/usr/share/ghostscript/*/lib/gslp.ps"))
    assert gs and printers, "Ghostscript is needed (apt-get install ghostscript; scripts/setup.sh --tests does it)"
    # -dSAFER reads only what it is allowed to: the printer and the text
    subprocess.run([gs, "-q", "-dSAFER", f"--permit-file-read={text_file}", "-dNOPAUSE", "-dBATCH",
                    "-sDEVICE=pdfwrite", f"-sOutputFile={pdf}", "--", printers[-1], str(text_file)],
                   check=True, capture_output=True, timeout=120)
    assert pdf.read_bytes().startswith(b"%PDF")
    return pdf


@pytest.fixture(scope="module")
def document_folder(python_docs_html, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("documents")
    (folder / "html").mkdir()
    for page in HTML_PAGES:
        shutil.copy(python_docs_html / page, folder / "html" / Path(page).name)
    (folder / "pdf").mkdir()
    for source in PDF_SOURCES:
        stem = Path(source).name.split(".")[0]
        ghostscript_pdf(python_docs_html / "_sources" / source, folder / "pdf" / f"{stem}.pdf")
    shutil.copy(python_docs_html / "_sources" / "library" / "grp.rst.txt", folder / "grp.txt")
    shutil.copy(REPO / "README.md", folder / "README.md")
    # bad files: a PDF cut in half, a text file with a byte that is not UTF-8, an empty file
    whole = (folder / "pdf" / "fnmatch.pdf").read_bytes()
    (folder / "pdf" / "damaged.pdf").write_bytes(whole[: len(whole) // 2])
    (folder / "latin1.txt").write_bytes((python_docs_html / "_sources" / "library" / "pwd.rst.txt").read_bytes()
                                        + "caf\u00e9".encode("latin-1"))
    (folder / "empty.txt").write_bytes(b"")
    return folder


GOOD_FILES = 4 + 2 + 1 + 1


@pytest.fixture(params=["in_memory", pytest.param("elasticsearch", marks=pytest.mark.elasticsearch)])
def store_section(request, tmp_path):
    if request.param == "elasticsearch":
        url = request.getfixturevalue("elasticsearch_url")
        return {"type": "elasticsearch", "hosts": url, "index": request.getfixturevalue("es_index_name"),
                "max_retries": 1}
    return {"type": "in_memory", "persist_path": str(tmp_path / "folder.json")}


def test_a_folder_of_html_pdf_text_and_markdown_into_both_stores_counting_bad_files(document_folder, store_section,
                                                                                     tmp_path):
    config = tmp_path / "folder.yaml"
    config.write_text(yaml.safe_dump({
        "name": "folder", "store": store_section,
        "corpus": {"format": "folder", "path": str(document_folder), "count_tokens_for": [],
                   "chunking": {"split_by": "word", "split_length": 100, "split_overlap": 20}},
        "embedding": {"enabled": False},
        "writer": {"batch_size": 25, **({"checkpoint_path": str(tmp_path / "ckpt.json")}
                                        if store_section["type"] == "elasticsearch" else {})}}))
    report_path = tmp_path / "report.json"
    assert main(["index", "--config", str(config), "--report", str(report_path), "--no-progress"]) == 0
    report = json.loads(report_path.read_text())
    assert report["count_ok"] is True and report["documents_in_store"] == report["passages_streamed"]
    assert report["skips"]["counts"] == {"unreadable or corrupt file": 2, "empty text": 1}, report["skips"]
    examples = " ".join(report["skips"]["examples"]["unreadable or corrupt file"])
    assert "pdf/damaged.pdf" in examples and "latin1.txt" in examples
    assert report["skips"]["examples"]["empty text"] == ["record: empty.txt"]

    handle = open_index(load_index_config(config))
    store = handle.document_store
    documents = store.filter_documents()
    assert len({d.meta["file_path"] for d in documents}) == GOOD_FILES
    by_id = {d.id: d for d in documents}
    # an HTML page: its <title>, its text (navigation left out by HTMLToDocument), 100-word windows overlapping by 20
    keyword = sorted((d for d in documents if d.meta["file_path"] == "html/keyword.html"), key=lambda d: d.id)
    assert keyword[0].id == "html/keyword.html-word100o20-00000"
    assert keyword[0].meta["title"].startswith("keyword — Testing for Python keywords")
    # (Haystack's word unit is text between single spaces: the last 20 of the first passage start the second)
    assert len(keyword) >= 2 and keyword[1].content.startswith(" ".join(keyword[0].content.split(" ")[80:]))
    found = handle.retrieve("Return True if s is a Python keyword", method="bm25", top_k=3)
    assert found[0].meta["file_path"] == "html/keyword.html"
    # a PDF Ghostscript wrote: its text is searchable, its passages carry their page numbers
    pdf = [d for d in documents if d.meta["file_path"] == "pdf/colorsys.pdf"]
    assert pdf and all(d.meta["page_number"] >= 1 for d in pdf)
    found = handle.retrieve("conversions between RGB and YIQ color space", method="bm25", top_k=3)
    assert found[0].meta["file_path"] == "pdf/colorsys.pdf"
    # Markdown: the first heading is the title
    readme = [d for d in documents if d.meta["file_path"] == "README.md"]
    assert readme and readme[0].meta["title"] == "icr2_components"
    assert by_id["grp.txt-word100o20-00000"].meta["title"] == "grp"


def test_chunking_units_are_settings_of_haystacks_splitter(document_folder):
    def passages(chunking: dict) -> list:
        settings = corpus_settings_from_mapping({"format": "folder", "path": str(document_folder),
                                                 "include": ["grp.txt"], "chunking": chunking})
        return list(corpus_reader(settings).documents())

    words = passages({"split_by": "word", "split_length": 50})
    paragraphs = passages({"split_by": "passage", "split_length": 1})
    whole = passages({"split_by": "none"})
    assert len(whole) == 1 and whole[0].id == "grp.txt"
    text = whole[0].content
    assert len(words) == -(-len(text.split(" ")) // 50)
    assert len(paragraphs) == len([p for p in text.split("\n\n") if p.strip()])
    assert paragraphs[0].id == "grp.txt-passage1o0-00000"
    # full stops, two a passage, one shared: the second passage starts with the first one's last unit
    periods = passages({"split_by": "period", "split_length": 2, "split_overlap": 1})
    first = periods[0].content
    assert len(periods) > 2 and periods[1].content.startswith(first[first.index(".") + 1:])
    from icr2_components.corpora.chunking import sentence_data_problem

    problem = sentence_data_problem()
    if problem:  # no NLTK punkt_tab data here: a clear error at the start, never a download attempt mid-load
        with pytest.raises(ConfigError, match="split_by: sentence needs"):
            passages({"split_by": "sentence", "split_length": 3})
    else:
        assert len(passages({"split_by": "sentence", "split_length": 3})) > 1


def test_the_shipped_python_docs_config_indexes_the_pages_with_embeddings(python_docs_html, tmp_path):
    """indexing/python-docs.yaml as shipped (MiniLM embeddings, token counts), on four of the pages."""
    folder = tmp_path / "html"
    for page in HTML_PAGES:
        (folder / Path(page).parent).mkdir(parents=True, exist_ok=True)
        shutil.copy(python_docs_html / page, folder / page)
    (folder / "genindex-A.html").write_bytes((python_docs_html / "genindex-A.html").read_bytes())  # excluded
    shipped = load_index_config("python-docs")
    assert shipped.corpus.format == "folder" and shipped.embedding.enabled
    assert shipped.corpus.resolved_path() == Path(os.environ.get("ICR2_CACHE_DIR") or Path.home() / ".cache" /
                                                  "icr2_components") / "python-docs" / "html"
    report = tmp_path / "report.json"
    assert main(["index", "--config", "indexing/python-docs.yaml", "--set", f"corpus.path={folder}",
                 "--set", f"store.persist_path={tmp_path / 'docs.json'}", "--report", str(report),
                 "--no-progress"]) == 0
    built = json.loads(report.read_text())
    assert built["count_ok"] and built["skips"]["total"] == 0
    handle = open_index(load_index_config("python-docs", overrides={"corpus.path": str(folder),
                                                                    "store.persist_path": str(tmp_path / "docs.json")}))
    pages = {d.meta["file_path"] for d in handle.document_store.filter_documents()}
    assert pages == set(HTML_PAGES)
    found = handle.retrieve("how do I read a password without echoing it on the terminal", method="dense", top_k=3)
    assert found[0].meta["file_path"] == "library/getpass.html"
    assert "token_counts" in found[0].meta
