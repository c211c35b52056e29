"""The answer cache proves every line is whole: on the real answers of the ICR2 Table 3 closed-book arm (426
records answered by SmolLM2, kept in bench/results), an edited answer, a copied line, a removed line and a cut
last line are each caught, appends start on a fresh line, and the committed unsealed caches read as they always
did."""

import gzip
import json
import re
from pathlib import Path

import pytest

from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import (
    AnswerCache,
    AnswerCacheError,
    read_answer_records,
    record_sha,
    seal_cache,
)

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
ARM = ROOT / "bench" / "results" / "icr2_table3" / "arms" / "closed_book" / "answers.jsonl.gz"
#: the committed cache's lines (it is committed gzip-compressed; the copies below are plain caches)
ARM_BYTES = gzip.decompress(ARM.read_bytes())


@pytest.fixture
def sealed(tmp_path) -> Path:
    """The arm's cache copied and sealed (``icr2 seal-cache``)."""
    path = tmp_path / "answers.jsonl"
    path.write_bytes(ARM_BYTES)
    assert main(["seal-cache", str(path)]) == 0
    return path


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def write_lines(path: Path, rows: list[str], newline_at_end: bool = True) -> None:
    path.write_text("\n".join(rows) + ("\n" if newline_at_end else ""), encoding="utf-8")


def test_committed_unsealed_caches_read_as_before_and_are_refused_for_writing(tmp_path):
    plain = [json.loads(line) for line in ARM_BYTES.decode("utf-8").splitlines() if line.strip()]
    assert read_answer_records(ARM) == plain  # one record per key: the Table 3 report's input is unchanged
    assert AnswerCache(ARM, writable=False).unsealed_lines == 426
    copy = tmp_path / "answers.jsonl"
    copy.write_bytes(ARM_BYTES)
    with pytest.raises(AnswerCacheError, match=rf"{copy} holds 426 record\(s\) written before .*\(icr2 seal-cache"):
        AnswerCache(copy)


def test_sealing_keeps_every_record_and_later_lines_of_a_key_replace_earlier(sealed, tmp_path):
    records = read_answer_records(sealed)
    plain = [json.loads(line) for line in ARM_BYTES.decode("utf-8").splitlines() if line.strip()]
    assert [{k: v for k, v in r.items() if k != "record_sha"} for r in records] == plain
    assert all(r["record_sha"] == record_sha(r) for r in records)
    assert (tmp_path / "answers.jsonl.unsealed").read_bytes() == ARM_BYTES
    with pytest.raises(AnswerCacheError, match="sealed already"):
        seal_cache(sealed)


def test_an_edited_answer_is_refused_naming_the_file_and_line(sealed):
    rows = lines(sealed)
    record = json.loads(rows[6])
    assert record["answer"] != record["answers"][0]
    rows[6] = json.dumps({**record, "answer": record["answers"][0]}, ensure_ascii=False)  # a wrong answer made right
    write_lines(sealed, rows)
    for writable in (True, False):
        expected = re.escape(f"{sealed} line 7 ({record['key']}) does not match its record_sha")
        with pytest.raises(AnswerCacheError, match=expected):
            AnswerCache(sealed, writable=writable)
    rows[6] = json.dumps({k: v for k, v in record.items() if k != "record_sha"}, ensure_ascii=False)  # seal dropped
    write_lines(sealed, rows)
    with pytest.raises(AnswerCacheError, match=rf"{sealed} line 7 has no record_sha"):
        read_answer_records(sealed)


def test_a_duplicated_or_removed_line_is_refused_and_a_replacement_is_read(sealed):
    rows = lines(sealed)
    write_lines(sealed, [*rows, rows[2]])  # a line copied to the end: the key twice, never silently the last
    with pytest.raises(AnswerCacheError, match=r"has key .* on lines 3 and 427, and line 427 does not say it replaces"):
        read_answer_records(sealed)
    write_lines(sealed, rows)
    cache = AnswerCache(sealed)
    first = cache.records[json.loads(rows[2])["key"]]
    written = cache.add({**first, "answer": "redone"})  # a writer's replacement names what it replaces
    assert written["replaces"] == first["record_sha"]
    assert read_answer_records(sealed)[2]["answer"] == "redone"
    assert AnswerCache(sealed, writable=False).replaced_lines == 1
    write_lines(sealed, [row for i, row in enumerate(lines(sealed)) if i != 2])  # the replaced line removed
    with pytest.raises(AnswerCacheError, match=r"line 426 .* replaces a record that is not in the file"):
        read_answer_records(sealed)


def test_a_cut_last_line_is_counted_cut_off_and_the_next_answer_starts_on_a_fresh_line(sealed):
    rows = lines(sealed)
    cut = rows[-1][: len(rows[-1]) // 2]
    write_lines(sealed, [*rows[:-1], cut], newline_at_end=False)  # killed while writing the last answer
    reader = AnswerCache(sealed, writable=False)
    assert reader.cut_tail_lines == 1 and len(reader.records) == 425
    assert sealed.read_text(encoding="utf-8").endswith(cut)  # a reader leaves the file alone
    writer = AnswerCache(sealed)
    assert writer.cut_tail_lines == 1 and sealed.read_text(encoding="utf-8").endswith("\n")
    redone = json.loads(rows[-1])
    writer.add({**redone, "latency_s": 0.5})
    again = AnswerCache(sealed)
    assert again.cut_tail_lines == 0 and len(again.records) == 426
    assert again.records[redone["key"]]["answer"] == redone["answer"]
    assert len(lines(sealed)) == 426


def test_a_whole_last_record_without_its_newline_is_kept_and_terminated(sealed):
    rows = lines(sealed)
    write_lines(sealed, rows, newline_at_end=False)
    cache = AnswerCache(sealed)
    assert cache.cut_tail_lines == 0 and len(cache.records) == 426
    cache.add({**json.loads(rows[0]), "key": "new|key|open"})
    assert len(lines(sealed)) == 427 and json.loads(lines(sealed)[-1])["key"] == "new|key|open"
