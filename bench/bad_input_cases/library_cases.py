"""Bad files through the library's readers, called in this process as a user's code calls them: corpus tables
(CSV, Parquet, JSON lines), KILT articles and folders of documents, question sets, index configs, backend files,
training recipes and pipeline YAMLs holding NaN, infinity or a boolean where a number belongs; and whether every
skipped input is named. Each case writes real bad bytes to disk first.

A case is classified as the component cases are (``component_cases.classify_call``): a one-line error from the
library naming the input, or a result whose check holds (read apart from the code that made it: the passages'
text, the rows kept, the skip file's lines); a result that lost rows is ``data loss``; no return within the case's
time limit is a ``hang``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bad_input_cases.common import REPO
from bad_input_cases.component_cases import Call, classify_call

ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"
ROWS = 20


# -- reading, as a user's code reads ----------------------------------------------------------------------------


def read_corpus(mapping: dict[str, Any]) -> tuple[list, dict]:
    """``(passages, skips)`` of a corpus section, read by the library's corpus reader."""
    from icr2_components.corpora import corpus_reader, corpus_settings_from_mapping

    reader = corpus_reader(corpus_settings_from_mapping({"count_tokens_for": [], **mapping}, "bench corpus"))
    documents = list(reader.documents())
    return documents, reader.skips.as_dict()


def read_named(mapping: dict[str, Any], skip_path: Path) -> tuple[list, dict, list[dict]]:
    """As :func:`read_corpus`, inside a run's skip file: ``(passages, skips, every skip file line)``."""
    from icr2_components.records.skips import skip_file

    with skip_file(skip_path):
        documents, skips = read_corpus(mapping)
    lines = [json.loads(line) for line in skip_path.read_text().splitlines()] if skip_path.is_file() else []
    return documents, skips, lines


def index_in_memory(mapping: dict[str, Any]):
    """The corpus indexed into an in-memory store (no embeddings): the library's whole indexing path."""
    from icr2_components.stores import IndexHandle
    from icr2_components.stores.config import index_config_from_dict

    config = index_config_from_dict({"name": "bench", "store": {"type": "in_memory"},
                                     "corpus": {"count_tokens_for": [], **mapping},
                                     "embedding": {"enabled": False}}, "bench config")
    return IndexHandle(config).build(progress=False)


def read_questions(path: Path, fields: dict | None = None, fmt: str | None = None):
    """``(rows, skips)`` of a question set, as ``icr2 compare --dataset`` reads it."""
    from icr2_components.kilt.question_sets import QuestionSet, read_question_rows

    questions = QuestionSet.from_options(path, fmt, fields).check_columns()
    rows, skips = read_question_rows(questions)
    return rows, skips.as_dict()


# -- checks of what was read ------------------------------------------------------------------------------------


def _marks(documents) -> list[list[str]]:
    """The ``rowN`` marks each passage holds (one per row written): a passage holding two swallowed a row."""
    import re

    return [re.findall(r"\brow\d+\b", d.content or "") for d in documents]


def rows_kept(expected: int, reason: str | None = None) -> Callable[[Any], tuple[bool, str]]:
    """``expected`` passages, one row each, and (``reason``) a skip of that reason counted."""

    def check(result: Any) -> tuple[bool, str]:
        documents, skips = result[0], result[1]
        marks = _marks(documents)
        whole = all(len(m) == 1 for m in marks)
        ok = len(documents) == expected and whole and (reason is None or skips["counts"].get(reason, 0) >= 1)
        return ok, f"{len(documents)} passages (expected {expected}), skips {skips['counts']}" + (
            "" if whole else f"; a passage holds rows {next(m for m in marks if len(m) != 1)}")

    return check


def no_row_lost(least: int) -> Callable[[Any], tuple[bool, str]]:
    """No passage swallowed another row, and at least ``least`` rows are there (the others named as skips)."""

    def check(result: Any) -> tuple[bool, str]:
        documents, skips = result[0], result[1]
        marks = _marks(documents)
        swallowed = [m for m in marks if len(m) > 1]
        named = sum(skips["counts"].values())
        ok = not swallowed and len(documents) + named >= least
        return ok, f"{len(documents)} passages + {named} named skips (of {least} rows)" + (
            f"; rows {swallowed[0]} in one passage" if swallowed else "")

    return check


def skipped_as(reason: str, count: int = 1, passages: int | None = None) -> Callable[[Any], tuple[bool, str]]:
    def check(result: Any) -> tuple[bool, str]:
        documents, skips = result[0], result[1]
        ok = skips["counts"].get(reason, 0) == count and (passages is None or len(documents) == passages)
        return ok, f"{len(documents)} passages, skips {skips['counts']}"

    return check


def every_skip_named(expected: list[str]) -> Callable[[Any], tuple[bool, str]]:
    """The skip file names each of ``expected`` (a line number or a file name) in one of its lines."""

    def check(result: Any) -> tuple[bool, str]:
        lines = result[2]
        shown = [json.dumps(line, ensure_ascii=False) for line in lines]
        missing = [e for e in expected if not any(e in s for s in shown)]
        return not missing, f"skip file: {len(lines)} lines" + (f"; never names {missing}" if missing else "")

    return check


def questions_are(expected: list[tuple[str, list[str]]]) -> Callable[[Any], tuple[bool, str]]:
    """The questions read, with their answers, are exactly ``expected`` (question text, answers)."""

    def check(result: Any) -> tuple[bool, str]:
        rows, skips = result
        got = [(r.question, list(r.answers)) for r in rows]
        return got == expected, f"read {got[:4]}{'...' if len(got) > 4 else ''}; skips {skips['counts']}"

    return check


# -- the cases ----------------------------------------------------------------------------------------------------


def _csv_rows(n: int = ROWS) -> list[str]:
    return [f"{i},Title {i},row{i} holds words of row {i}" for i in range(1, n + 1)]


def table_cases(tmp: Path) -> list[Call]:
    """Corpus tables read leniently once: a quote left open, a header naming a column twice, rows of other widths,
    bytes that are not UTF-8 or NUL, typed columns."""
    out: list[Call] = []

    def csv(name: str, lines: list[str] | bytes, header: str = "id,title,text") -> Path:
        path = tmp / name
        data = lines if isinstance(lines, bytes) else ("\n".join([header, *lines]) + "\n").encode("utf-8")
        path.write_bytes(data)
        return path

    n = "CSV corpus"
    rows = _csv_rows()
    unclosed = rows.copy()
    unclosed[3] = '4,Title 4,"row4 opens a quote it never closes'
    p = csv("unclosed.csv", unclosed)
    out.append(Call(f"{n}: an unclosed quote in row 4 of 20", n, lambda p=p: read_corpus({"format": "csv",
                                                                                          "path": str(p)}),
                    says=("unclosed.csv", "line"), right=no_row_lost(ROWS), kept=no_row_lost(ROWS)))
    p = csv("dup_header.csv", rows, header="id,text,text")
    out.append(Call(f"{n}: a header naming `text` twice", n, lambda p=p: read_corpus({"format": "csv",
                                                                                     "path": str(p)}),
                    says=("dup_header.csv", "text")))
    p = csv("dup_title.csv", rows, header="id,title,title")
    out.append(Call(f"{n}: a header naming `title` twice", n,
                    lambda p=p: read_corpus({"format": "csv", "path": str(p), "fields": {"text": "title"}}),
                    says=("dup_title.csv", "title")))
    wide = rows.copy()
    wide[6] = "7,Title 7,row7 words,an extra field"
    p = csv("wide.csv", wide)
    out.append(Call(f"{n}: row 7 with a field more than the header", n,
                    lambda p=p: read_corpus({"format": "csv", "path": str(p)}), right=rows_kept(ROWS - 1),
                    says=("wide.csv", "7"), kept=no_row_lost(ROWS)))
    narrow = rows.copy()
    narrow[8] = "9,row9 only two fields"
    p = csv("narrow.csv", narrow)
    out.append(Call(f"{n}: row 9 with a field fewer than the header", n,
                    lambda p=p: read_corpus({"format": "csv", "path": str(p)}), right=rows_kept(ROWS - 1),
                    says=("narrow.csv", "9"), kept=no_row_lost(ROWS)))
    data = ("\n".join(["id,title,text", *rows]) + "\n").encode().replace(b"row5 holds", b"row5 \x00holds")
    p = csv("nul.csv", data)
    out.append(Call(f"{n}: a NUL byte in row 5", n, lambda p=p: read_corpus({"format": "csv", "path": str(p)}),
                    right=no_row_lost(ROWS), says=("nul.csv",), kept=no_row_lost(ROWS)))
    data = ("\n".join(["id,title,text", *rows]) + "\n").encode().replace(b"row3 holds", b"row3 caf\xe9 holds")
    p = csv("latin1.csv", data)
    out.append(Call(f"{n}: a byte 0xe9 that is not UTF-8 in row 3", n,
                    lambda p=p: read_corpus({"format": "csv", "path": str(p)}),
                    right=rows_kept(ROWS - 1, "not UTF-8"), says=("latin1.csv", "UTF-8"), kept=no_row_lost(ROWS)))
    p = csv("bom.csv", b"\xef\xbb\xbf" + ("\n".join(["id,title,text", *rows]) + "\n").encode())
    out.append(Call(f"{n}: a UTF-8 byte-order mark before the header", n,
                    lambda p=p: read_corpus({"format": "csv", "path": str(p)}), right=rows_kept(ROWS)))
    p = csv("crlf.csv", ("\r\n".join(["id,title,text", *rows]) + "\r\n").encode())
    out.append(Call(f"{n}: CRLF line ends", n, lambda p=p: read_corpus({"format": "csv", "path": str(p)}),
                    right=lambda res: (rows_kept(ROWS)(res)[0] and not any("\r" in d.content for d in res[0]),
                                       rows_kept(ROWS)(res)[1])))
    zw = rows.copy()
    zw[10] = f"11,Title 11,{ZERO_WIDTH * 3}"
    p = csv("zero_width.csv", zw)
    out.append(Call(f"{n}: row 11's text all zero-width characters", n,
                    lambda p=p: read_corpus({"format": "csv", "path": str(p)}),
                    right=rows_kept(ROWS - 1, "empty text")))
    blank = rows.copy()
    blank[11] = "12,Title 12,   "
    p = csv("blank.csv", blank)
    out.append(Call(f"{n}: row 12's text only spaces", n, lambda p=p: read_corpus({"format": "csv",
                                                                                  "path": str(p)}),
                    right=rows_kept(ROWS - 1, "empty text")))
    repeated = rows.copy()
    repeated[12] = "1,Title 13,row13 reuses id 1"
    p = csv("repeated_id.csv", repeated)
    out.append(Call(f"{n}: row 13 repeating row 1's id", n,
                    lambda p=p: read_corpus({"format": "csv", "path": str(p)}),
                    right=rows_kept(ROWS - 1, "duplicate id (first record kept)")))
    multiline = rows.copy()
    multiline[2] = '3,Title 3,"row3 spans\ntwo lines, legally quoted"'
    p = csv("multiline.csv", multiline)
    out.append(Call(f"{n}: a quoted text spanning two lines (valid CSV)", n,
                    lambda p=p: read_corpus({"format": "csv", "path": str(p)}),
                    right=lambda res: (rows_kept(ROWS)(res)[0] and any("two lines" in d.content for d in res[0]),
                                       rows_kept(ROWS)(res)[1])))
    quotes = rows.copy()
    quotes[4] = '5,Title 5,"row5 says ""hello"" twice"'
    p = csv("quotes.csv", quotes)
    out.append(Call(f"{n}: doubled quotes inside a quoted field (valid CSV)", n,
                    lambda p=p: read_corpus({"format": "csv", "path": str(p)}),
                    right=lambda res: (rows_kept(ROWS)(res)[0] and any('"hello"' in d.content for d in res[0]),
                                       rows_kept(ROWS)(res)[1])))
    p = csv("semicolons.csv", [r.replace(",", ";") for r in rows], header="id;title;text")
    out.append(Call(f"{n}: a semicolon-separated file named .csv", n,
                    lambda p=p: read_corpus({"format": "csv", "path": str(p)}), says=("semicolons.csv", "text")))
    huge = rows.copy()
    huge[14] = "15,Title 15,row15 " + "x" * 200_000
    p = csv("huge_cell.csv", huge)
    out.append(Call(f"{n}: a 200,000-character cell in row 15 (past Python csv's field limit)", n,
                    lambda p=p: read_corpus({"format": "csv", "path": str(p)}), right=no_row_lost(ROWS),
                    says=("huge_cell.csv",), kept=no_row_lost(ROWS)))
    p = csv("random.csv", random.Random(3).randbytes(4096))
    out.append(Call(f"{n}: 4 KB of random bytes named .csv", n,
                    lambda p=p: index_in_memory({"format": "csv", "path": str(p)}), says=("random.csv",)))
    p = csv("header_only.csv", [])
    out.append(Call(f"{n}: a header and no row", n,
                    lambda p=p: index_in_memory({"format": "csv", "path": str(p)}), says=("header_only.csv",)))
    p = csv("tabs.tsv", [r.replace(",", "\t") for r in rows], header="id\ttitle\ttext")
    out.append(Call(f"{n}: a .tsv file", n, lambda p=p: read_corpus({"format": "csv", "path": str(p)}),
                    right=rows_kept(ROWS), says=("tabs.tsv", "text")))
    p = csv("fields.csv", rows)
    out.append(Call(f"{n}: fields.text naming a column the file lacks", n,
                    lambda p=p: read_corpus({"format": "csv", "path": str(p), "fields": {"text": "body"}}),
                    says=("body",)))
    out += parquet_cases(tmp)
    return out


def parquet_cases(tmp: Path) -> list[Call]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = "Parquet corpus"
    out: list[Call] = []

    def table(name: str, columns: dict[str, list]) -> Path:
        path = tmp / name
        pq.write_table(pa.table(columns), path)
        return path

    ids = list(range(1, ROWS + 1))
    texts = [f"row{i} holds words of row {i}" for i in ids]
    p = table("years.parquet", {"id": ids, "title": [1969.0 + i for i in range(ROWS)], "text": texts})
    out.append(Call(f"{n}: a float title column (1969.0)", n,
                    lambda p=p: read_corpus({"format": "parquet", "path": str(p)}),
                    right=lambda res: (res[0][0].meta.get("title") in ("1969", 1969) and len(res[0]) == ROWS,
                                       f"first title {res[0][0].meta.get('title')!r}, {len(res[0])} passages")))
    p = table("int_text.parquet", {"id": ids, "title": [f"T{i}" for i in ids], "text": ids})
    out.append(Call(f"{n}: an integer text column", n, lambda p=p: read_corpus({"format": "parquet",
                                                                                 "path": str(p)}),
                    right=skipped_as("text is not a string", ROWS, 0), says=("int_text.parquet", "text")))
    p = table("null_text.parquet", {"id": ids, "title": [f"T{i}" for i in ids],
                                    "text": [None if i == 4 else t for i, t in zip(ids, texts, strict=True)]})
    out.append(Call(f"{n}: a null text in row 4", n, lambda p=p: read_corpus({"format": "parquet", "path": str(p)}),
                    right=skipped_as("missing text field", 1, ROWS - 1)))
    p = table("float_ids.parquet", {"id": [float(i) if i != 2 else None for i in ids], "title": ["T"] * ROWS,
                                    "text": texts})
    out.append(Call(f"{n}: an id column of floats with a null (7.0 is the id 7)", n,
                    lambda p=p: read_corpus({"format": "parquet", "path": str(p)}),
                    right=lambda res: (any(d.id.startswith("7") and not d.id.startswith("7.0") for d in res[0])
                                       and not any(".0" in d.id for d in res[0]) and len(res[0]) == ROWS - 1,
                                       f"ids {[d.id for d in res[0]][:4]}..., skips {res[1]['counts']}")))
    junk = tmp / "random.parquet"
    junk.write_bytes(random.Random(5).randbytes(2048))
    out.append(Call(f"{n}: 2 KB of random bytes named .parquet", n,
                    lambda: index_in_memory({"format": "parquet", "path": str(junk)}), says=("random.parquet",)))
    whole = table("whole.parquet", {"id": ids, "title": ["T"] * ROWS, "text": texts})
    cut = tmp / "cut.parquet"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    out.append(Call(f"{n}: a Parquet file cut in half", n,
                    lambda: index_in_memory({"format": "parquet", "path": str(cut)}), says=("cut.parquet",)))
    folder = tmp / "parquets"
    folder.mkdir()
    pq.write_table(pa.table({"id": ids[:10], "title": ["T"] * 10, "text": texts[:10]}), folder / "a.parquet")
    pq.write_table(pa.table({"question": ["q"], "answer": ["a"]}), folder / "b_other_schema.parquet")
    pq.write_table(pa.table({"id": ids[10:], "title": ["T"] * 10, "text": texts[10:]}), folder / "c.parquet")
    out.append(Call(f"{n}: a folder with one file of another schema among two good ones", n,
                    lambda: read_corpus({"format": "parquet", "path": str(folder)}),
                    right=lambda res: (len(res[0]) == ROWS and res[1]["total"] >= 1
                                       and "b_other_schema" in json.dumps(res[1]),
                                       f"{len(res[0])} passages, skips {res[1]['counts']} "
                                       f"{'naming' if 'b_other_schema' in json.dumps(res[1]) else 'not naming'} it"),
                    says=("b_other_schema.parquet",)))
    return out


def record_cases(tmp: Path) -> list[Call]:
    """JSON lines corpora and KILT articles with values of the wrong kind, text that prints nothing, and a run
    whose skips outnumber what a report shows: the skip file must name every one."""
    out: list[Call] = []

    def jsonl(name: str, lines: list[str]) -> Path:
        path = tmp / name
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    good = [json.dumps({"id": f"r{i}", "text": f"row{i} holds words of row {i}"}) for i in range(1, ROWS + 1)]
    n = "JSONL corpus"
    for label, line, reason in (
        ("a JSON list on line 6", "[1, 2, 3]", None),
        ("text NaN on line 6", '{"id": "r6", "text": NaN}', None),
        ("text an object on line 6", '{"id": "r6", "text": {"en": "row6"}}', "text is not a string"),
        ("id true on line 6", '{"id": true, "text": "row6 holds words"}', "id is not a string or an integer"),
        ("id 1e400 (infinity) on line 6", '{"id": 1e400, "text": "row6 holds words"}',
         "id is not a string or an integer"),
        ("text of zero-width characters on line 6", json.dumps({"id": "r6", "text": ZERO_WIDTH}), "empty text"),
        ("text of one soft hyphen and a BOM on line 6", json.dumps({"id": "r6", "text": "\u00ad\ufeff"}),
         "empty text"),
        ("a line with text glued after the object", '{"id": "r6", "text": "row6 x"} trailing', None),
    ):
        lines = good.copy()
        lines[5] = line
        p = jsonl(f"records_{len(out)}.jsonl", lines)
        check = skipped_as(reason, 1, ROWS - 1) if reason else rows_kept(ROWS - 1)
        out.append(Call(f"{n}: {label}", n, lambda p=p: read_corpus({"format": "jsonl", "path": str(p)}),
                        right=check, says=(p.name, "6"), kept=no_row_lost(ROWS)))
    eight = good.copy()
    bad_lines = [3, 5, 7, 9, 11, 13, 15, 17]
    for number in bad_lines:
        eight[number - 1] = '{"id": "x", "text": 5}'.replace('"x"', f'"bad{number}"')
    p = jsonl("eight_bad.jsonl", eight)
    out.append(Call(f"{n}: 8 bad lines (more than a report's examples): the skip file names every one", n,
                    lambda p=p: read_named({"format": "jsonl", "path": str(p)}, tmp / "eight_skips.jsonl"),
                    right=every_skip_named([f'"line": {b}' for b in bad_lines])))
    k = "KILT corpus"

    def article(wid, title, *paragraphs) -> str:
        return json.dumps({"wikipedia_id": wid, "wikipedia_title": title, "text": [title, *paragraphs]})

    articles = [article(str(i), f"A{i}", f"row{i} holds words of article {i}") for i in range(1, 7)]
    for label, line, reason in (
        ("an article of zero-width paragraphs", article("3", "A3", ZERO_WIDTH, "\u200b \u200b"),
         "article with no text"),
        ("an article whose text is a string", json.dumps({"wikipedia_id": "3", "wikipedia_title": "A3",
                                                          "text": "row3 not a list"}),
         "text is not a list of paragraphs"),
        ("wikipedia_id NaN", '{"wikipedia_id": NaN, "wikipedia_title": "A3", "text": ["A3", "row3 x"]}', None),
        ("wikipedia_title null", json.dumps({"wikipedia_id": "3", "wikipedia_title": None, "text": ["x", "row3"]}),
         None),
    ):
        lines = articles.copy()
        lines[2] = line
        p = jsonl(f"kilt_{len(out)}.jsonl", lines)
        out.append(Call(f"{k}: {label} on line 3", k, lambda p=p: read_corpus({"format": "kilt", "path": str(p)}),
                        right=(skipped_as(reason, 1, 5) if reason else rows_kept(5)), says=(p.name, "3"),
                        kept=no_row_lost(6)))
    return out


def folder_cases(tmp: Path) -> list[Call]:
    """A folder of documents with files that print nothing, only tags, damaged, named in bytes that are not UTF-8,
    a FIFO, a broken link; every skip named."""
    n = "folder corpus"
    out: list[Call] = []

    def folder(name: str) -> Path:
        path = tmp / name
        path.mkdir()
        for i in range(1, 4):
            (path / f"good{i}.txt").write_text(f"row{i} holds the words of good file {i}.\n", encoding="utf-8")
        return path

    def read(path: Path) -> Callable[[], Any]:
        return lambda: read_corpus({"format": "folder", "path": str(path)})

    f = folder("f_zero_width")
    (f / "invisible.txt").write_text(ZERO_WIDTH * 20, encoding="utf-8")
    out.append(Call(f"{n}: a .txt of zero-width characters", n, read(f), right=skipped_as("empty text", 1, 3)))
    f = folder("f_tags")
    (f / "tags.html").write_text("<html><head></head><body><div><span></span></div></body></html>", encoding="utf-8")
    out.append(Call(f"{n}: an .html file of tags only (empty text, as everywhere)", n, read(f),
                    right=skipped_as("empty text", 1, 3)))
    f = folder("f_md_tags")
    (f / "tags.md").write_text("<br/>\n<hr/>\n", encoding="utf-8")
    out.append(Call(f"{n}: a .md file of tags only", n, read(f), right=skipped_as("empty text", 1, 3)))
    f = folder("f_pdf")
    (f / "broken.pdf").write_bytes(b"%PDF-1.4\n" + random.Random(7).randbytes(2000))
    out.append(Call(f"{n}: a damaged .pdf", n, read(f),
                    right=lambda res: (len(res[0]) == 3 and "broken.pdf" in json.dumps(res[1]),
                                       f"{len(res[0])} passages, skips {res[1]['counts']}")))
    f = folder("f_latin1")
    (f / "latin1.txt").write_bytes("row9 caf\xe9 in Latin-1".encode("latin-1"))
    out.append(Call(f"{n}: a .txt in Latin-1", n, read(f),
                    right=lambda res: (len(res[0]) in (3, 4)
                                       and (len(res[0]) == 4 or "latin1.txt" in json.dumps(res[1]))
                                       and not any("\ufffd" in d.content for d in res[0]),
                                       f"{len(res[0])} passages, skips {res[1]['counts']}")))
    f = folder("f_name")
    with open(os.path.join(os.fsencode(f), b"caf\xe9.txt"), "wb") as handle:
        handle.write(b"row8 holds the words of a file named in Latin-1.\n")
    out.append(Call(f"{n}: a file whose name is not UTF-8", n, read(f),
                    right=lambda res: (len(res[0]) == 3 and res[1]["total"] == 1,
                                       f"{len(res[0])} passages, skips {res[1]['counts']}")))
    f = folder("f_fifo")
    fifo = f / "pipe.txt"
    os.mkfifo(fifo)

    def unblock(path: Path = fifo) -> None:
        # a reader blocked on the FIFO is freed by a writer opening and closing it
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    out.append(Call(f"{n}: a FIFO named pipe.txt", n, read(f), timeout_s=30, cleanup=unblock,
                    right=lambda res: (len(res[0]) == 3 and "pipe.txt" in json.dumps(res[1]),
                                       f"{len(res[0])} passages, skips {res[1]['counts']}")))
    f = folder("f_link")
    (f / "dangling.txt").symlink_to(tmp / "nowhere.txt")
    out.append(Call(f"{n}: a broken symbolic link", n, read(f),
                    right=lambda res: (len(res[0]) == 3 and "dangling.txt" in json.dumps(res[1]),
                                       f"{len(res[0])} passages, skips {res[1]['counts']}")))
    f = folder("f_dir_txt")
    (f / "folder.txt").mkdir()
    out.append(Call(f"{n}: a folder named folder.txt", n, read(f),
                    right=lambda res: (len(res[0]) == 3, f"{len(res[0])} passages, skips {res[1]['counts']}")))
    f = folder("f_six")
    names = [f"empty{i}.txt" for i in range(1, 7)]
    for name in names:
        (f / name).write_text("  \n", encoding="utf-8")
    out.append(Call(f"{n}: 6 empty files (more than a report's examples): the skip file names every one", n,
                    lambda f=f: read_named({"format": "folder", "path": str(f)}, tmp / "six_skips.jsonl"),
                    right=every_skip_named(names)))
    return out


def question_set_cases(tmp: Path) -> list[Call]:
    """Question sets: answers cells that are broken JSON, typed columns, tables read leniently, wrong kinds."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = "question set"
    out: list[Call] = []

    def write(name: str, text: str | bytes) -> Path:
        path = tmp / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
        return path

    header = "id,question,answers"
    good = ["q1,Who wrote Hamlet?,Shakespeare", "q2,What is the capital of France?,Paris",
            "q3,How many legs has a spider?,8"]
    p = write("broken_json.csv", "\n".join([header, good[0], 'q2,What is the capital of France?,"[""Paris"", '
                                           '""Lyon"""', good[2]]) + "\n")
    out.append(Call(f"{n}: a CSV answers cell holding a broken JSON list", n, lambda p=p: read_questions(p),
                    right=lambda res: (not any(a.startswith("[") for r in res[0] for a in r.answers)
                                       and len(res[0]) + res[1]["total"] == 3,
                                       f"answers {[r.answers for r in res[0]]}, skips {res[1]['counts']}"),
                    says=("broken_json.csv",)))
    p = write("json_list.csv", "\n".join([header, good[0], 'q2,What is the capital of France?,"[""Paris"", '
                                         '""City of Light""]"']) + "\n")
    out.append(Call(f"{n}: a CSV answers cell holding a JSON list", n, lambda p=p: read_questions(p),
                    right=questions_are([("Who wrote Hamlet?", ["Shakespeare"]),
                                         ("What is the capital of France?", ["Paris", "City of Light"])]),
                    says=("json_list.csv",)))
    p = tmp / "years.parquet"
    pq.write_table(pa.table({"id": ["q1", "q2"], "question": ["When did Apollo 11 land?", "When did WW2 end?"],
                             "answers": [1969.0, 1945.0]}), p)
    out.append(Call(f"{n}: a Parquet float answers column (1969.0)", n, lambda p=p: read_questions(p),
                    right=questions_are([("When did Apollo 11 land?", ["1969"]), ("When did WW2 end?", ["1945"])])))
    p = write("unclosed_q.csv", "\n".join([header, good[0], 'q2,"What is the capital of France?,Paris', good[2],
                                           "q4,Who painted the Mona Lisa?,Leonardo"]) + "\n")
    out.append(Call(f"{n}: a CSV question with an unclosed quote in row 2 of 4", n, lambda p=p: read_questions(p),
                    right=lambda res: (len(res[0]) + res[1]["total"] >= 4 and all("," not in r.question or "?" in
                                                                                  r.question for r in res[0])
                                       and not any("Spider" in r.question or ("legs" in r.question and "France" in
                                                   r.question) for r in res[0]),
                                       f"{len(res[0])} questions, skips {res[1]['counts']}"),
                    says=("unclosed_q.csv", "line")))
    p = write("dup_q.csv", "\n".join(["id,question,question", "q1,Who?,What?"]) + "\n")
    out.append(Call(f"{n}: a CSV header naming `question` twice", n, lambda p=p: read_questions(p),
                    says=("dup_q.csv", "question")))
    jl = [json.dumps({"id": "q1", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"]})]
    for label, line, reason in (
        ("question NaN", '{"id": "q2", "question": NaN, "answers": ["x"]}', "question is not text"),
        ("a question of zero-width characters", json.dumps({"id": "q2", "question": ZERO_WIDTH, "answers": ["x"]}),
         "missing question"),
        ("answers holding null", '{"id": "q2", "question": "Who?", "answers": ["a", null]}', "bad answers"),
        ("answers true", '{"id": "q2", "question": "Who?", "answers": true}', "bad answers"),
        ("an id NaN (read as no id: one is derived, or the row is skipped)",
         '{"id": NaN, "question": "Who?", "answers": ["x"]}', None),
        ("an id repeated", json.dumps({"id": "q1", "question": "Who else?", "answers": ["x"]}),
         "repeated question id"),
        ("answers a number 1e400 (infinity)", '{"id": "q2", "question": "Who?", "answers": 1e400}', "bad answers"),
    ):
        p = write(f"q_{len(out)}.jsonl", "\n".join([jl[0], line]) + "\n")
        if reason is None:
            def check(res):
                derived = [r for r in res[0] if r.derived_id]
                ok = (len(res[0]) == 1 and res[1]["total"] == 1) or (len(res[0]) == 2 and len(derived) == 1)
                return ok, f"{len(res[0])} questions ({len(derived)} with a derived id), skips {res[1]['counts']}"
        else:
            def check(res, r=reason):
                return (len(res[0]) == 1 and res[1]["counts"].get(r) == 1,
                        f"{len(res[0])} questions, skips {res[1]['counts']}")
        out.append(Call(f"{n}: {label} on line 2", n, lambda p=p: read_questions(p), right=check,
                        says=(p.name, "2")))
    p = write("bytes.jsonl", random.Random(11).randbytes(3000))
    out.append(Call(f"{n}: 3 KB of random bytes named .jsonl", n, lambda p=p: read_questions(p),
                    right=lambda res: (len(res[0]) == 0 and res[1]["total"] >= 1, f"skips {res[1]['counts']}"),
                    says=("bytes.jsonl",)))
    p = write("pipes.csv", "\n".join([header, "q1,Who founded Rome?,Romulus|Remus"]) + "\n")
    out.append(Call(f"{n}: CSV answers separated by '|'", n, lambda p=p: read_questions(p),
                    right=questions_are([("Who founded Rome?", ["Romulus", "Remus"])])))
    from icr2_components.kilt.question_sets import QuestionSet

    for label, text, says in (
        ("an unknown key (fileds)", "path: x.jsonl\nfileds: {question: q}\n", ("fileds",)),
        ("fields.question: 5", "path: q.jsonl\nfields: {question: 5}\n", ("question",)),
        ("list_separator: .nan", "path: q.jsonl\nlist_separator: .nan\n", ("list_separator",)),
        ("task_type: true", "path: q.jsonl\ntask_type: true\n", ("task_type",)),
    ):
        (tmp / "q.jsonl").write_text(jl[0] + "\n")
        (tmp / "x.jsonl").write_text(jl[0] + "\n")
        p = write(f"qs_{len(out)}.yaml", text)
        out.append(Call(f"question-set file with {label}", "question-set file",
                        lambda p=p: QuestionSet.from_file(p), says=(p.name, *says)))
    return out


def config_cases(tmp: Path) -> list[Call]:
    """Configurations holding NaN, infinity, a boolean or a value out of range where a number belongs, as YAML
    writes them (``.nan``, ``.inf``, ``true``): index configs, backend files, training recipes, pipelines."""
    import yaml

    from icr2_components.backends import load_backend
    from icr2_components.stores.config import load_index_config

    out: list[Call] = []
    base = {"name": "odd", "store": {"type": "in_memory"}, "corpus": {"path": "sample"},
            "embedding": {"enabled": False}}
    index_values = (
        ("store", "bm25_k1", ".nan"), ("store", "bm25_k1", ".inf"), ("store", "bm25_k1", "true"),
        ("store", "bm25_b", ".nan"), ("store", "bm25_b", "1.5"), ("corpus", "passage_words", ".nan"),
        ("corpus", "passage_words", "true"), ("corpus", "passage_words", "1e400"), ("corpus", "max_articles", "-1"),
        ("corpus", "max_articles", ".inf"), ("embedding", "batch_size", "0"), ("embedding", "batch_size", ".nan"),
        ("embedding", "processes", "true"), ("writer", "batch_size", ".inf"), ("writer", "checkpoint_seconds", ".nan"),
        ("writer", "checkpoint_seconds", "-.inf"),
    )
    for section, key, value in index_values:
        data = json.loads(json.dumps(base))
        data.setdefault(section, {})
        text = yaml.safe_dump(data).replace(f"{section}:\n", f"{section}:\n  {key}: {value}\n", 1) \
            if data.get(section) else yaml.safe_dump(data) + f"{section}: {{{key}: {value}}}\n"
        path = tmp / f"index_{len(out)}.yaml"
        path.write_text(text)
        out.append(Call(f"index config with `{section}.{key}: {value}`", "index config",
                        lambda p=path: load_index_config(p), says=(key,)))
    es = {"name": "odd", "store": {"type": "elasticsearch", "hosts": "http://127.0.0.1:9200", "index": "x"},
          "corpus": {"path": "sample"}, "embedding": {"enabled": False}}
    for key, value in (("request_timeout", ".nan"), ("request_timeout", ".inf"), ("max_retries", "true"),
                       ("max_retries", "-2"), ("shards", "0"), ("replicas", "1.5")):
        path = tmp / f"index_{len(out)}.yaml"
        path.write_text(yaml.safe_dump(es).replace("store:\n", f"store:\n  {key}: {value}\n", 1))
        out.append(Call(f"Elasticsearch index config with `store.{key}: {value}`", "index config",
                        lambda p=path: load_index_config(p), says=(key,)))
    for key, value in (("split_length", ".nan"), ("split_overlap", "-1"), ("split_length", "true"),
                       ("split_by", "paragraphs")):
        path = tmp / f"index_{len(out)}.yaml"
        path.write_text(yaml.safe_dump(base).replace("corpus:\n", f"corpus:\n  chunking: {{{key}: {value}}}\n"
                                                     "  format: jsonl\n", 1).replace("path: sample",
                                                                                     "path: x.jsonl"))
        out.append(Call(f"index config with `corpus.chunking.{key}: {value}`", "index config",
                        lambda p=path: load_index_config(p), says=(key,)))
    served = "kind: served\nserved_model: {api_base_url: 'http://127.0.0.1:8089/v1', model: m, %s}\n"
    for key, value in (("timeout_s", ".nan"), ("timeout_s", ".inf"), ("context_length", ".inf"),
                       ("context_length", "true"), ("max_retries", ".nan"), ("temperature", ".nan")):
        path = tmp / f"backend_{len(out)}.yaml"
        path.write_text(served % f"{key}: {value}")
        out.append(Call(f"backend file with `served_model.{key}: {value}`", "backend file",
                        lambda p=path: load_backend(p), says=(key,)))
    path = tmp / f"backend_{len(out)}.yaml"
    path.write_text(served.replace(", %s", "") + "max_concurrency: true\n")
    out.append(Call("backend file with `max_concurrency: true`", "backend file", lambda p=path: load_backend(p),
                    says=("max_concurrency",)))
    recipe = yaml.safe_load((REPO / "training" / "smollm2_cpu_rta.yaml").read_text())
    from icr2_components.training.recipe import load_recipe

    for key, value in (("learning_rate", float("nan")), ("learning_rate", float("inf")),
                       ("num_train_epochs", float("inf")), ("per_device_train_batch_size", True),
                       ("warmup_ratio", -0.5), ("weight_decay", float("nan")), ("max_steps", float("inf")),
                       ("gradient_accumulation_steps", 0), ("seed", True)):
        path = tmp / f"recipe_{len(out)}.yaml"
        changed = json.loads(json.dumps(recipe))
        changed.setdefault("training", {})[key] = value
        path.write_text(yaml.safe_dump(changed))  # YAML writes .nan, .inf, true as a user would
        shown = yaml.safe_dump(value).split("\n")[0]
        out.append(Call(f"training recipe with `training.{key}: {shown}`", "training recipe",
                        lambda p=path: load_recipe(p), says=(key,)))
    from icr2_components import load_pipeline

    pipeline = (REPO / "pipelines" / "vanilla_rag.yaml").read_text()
    for _key, value in (("top_k", ".nan"), ("top_k", ".inf"), ("top_k", "true")):
        if "top_k:" not in pipeline:
            break
        path = tmp / f"pipeline_{len(out)}.yaml"
        lines = pipeline.splitlines()
        changed = [(line.split("top_k:")[0] + f"top_k: {value}") if "top_k:" in line else line for line in lines]
        path.write_text("\n".join(changed) + "\n")
        out.append(Call(f"pipeline YAML with `top_k: {value}`", "load_pipeline", lambda p=path: load_pipeline(p),
                        says=("top_k",)))
    return out


def cases(tmp: Path) -> list[Call]:
    for name in ("tables", "records", "folders", "questions", "configs"):
        (tmp / name).mkdir(exist_ok=True)
    return [*table_cases(tmp / "tables"), *record_cases(tmp / "records"), *folder_cases(tmp / "folders"),
            *question_set_cases(tmp / "questions"), *config_cases(tmp / "configs")]


def run(tmp: Path, only: list[str] | None = None, progress: Callable | None = None) -> list[dict[str, Any]]:
    """Every library case, in this process; one record per case."""
    import logging

    logging.disable(logging.WARNING)
    results = []
    chosen = [c for c in cases(tmp) if only is None or any(o.lower() in c.what.lower() for o in only)]
    for case in (progress(chosen) if progress else chosen):
        record = classify_call(case)
        results.append({"surface": "library", "component": case.component, "input": case.what,
                        "setup": case.setup, "exit": "-", **record})
    logging.disable(logging.NOTSET)
    return results


if __name__ == "__main__":  # a quick look: python bench/bad_input_cases/library_cases.py [filter ...]
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    with tempfile.TemporaryDirectory() as folder:
        for r in run(Path(folder), sys.argv[1:] or None):
            print(f"[{r['class']}] {r['input']} -> {r['outcome'][:200]} {r['observed']}")
