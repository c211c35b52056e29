"""Gzip answer caches: appended one member per record and merged, read back whole, a cut last member counted and
cut off before the next append, a damaged member refused, and either name finding the file."""

import gzip
import json

import pytest

from icr2_components.evaluation.compare.cache import (
    COMPACT_EVERY,
    AnswerCache,
    AnswerCacheError,
    read_answer_records,
    resolve_cache_path,
)
from icr2_components.records.gzip_lines import read_members

pytestmark = pytest.mark.unit


def _record(i: int) -> dict:
    return {"key": f"p|q{i}|gold", "question_id": f"q{i}", "answer": f"answer {i} " + "words " * 40}


def _write(path, n: int) -> AnswerCache:
    cache = AnswerCache(path)
    for i in range(n):
        cache.add(_record(i))
    return cache


def test_gzip_cache_appends_members_and_merges_them(tmp_path):
    path = tmp_path / "answers.jsonl.gz"
    cache = _write(path, COMPACT_EVERY * 2 + 5)
    # every COMPACT_EVERY records the one-record members became one member; the last five wait
    assert [m.lines for m in read_members(path).members] == [COMPACT_EVERY, COMPACT_EVERY] + [1] * 5
    cache.compact()
    assert [m.lines for m in read_members(path).members] == [COMPACT_EVERY, COMPACT_EVERY, 5]
    # any gzip reader reads the members joined, in order
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    assert [json.loads(line)["question_id"] for line in lines] == [f"q{i}" for i in range(COMPACT_EVERY * 2 + 5)]
    assert read_answer_records(path) == list(cache)


def test_gzip_cache_compresses_like_a_whole_file(tmp_path):
    path = tmp_path / "answers.jsonl.gz"
    _write(path, 300).compact()
    whole = gzip.compress(gzip.decompress(path.read_bytes()))
    assert path.stat().st_size < 1.2 * len(whole)


def test_a_cut_last_member_is_counted_and_cut_before_appending(tmp_path):
    path = tmp_path / "answers.jsonl.gz"
    _write(path, 4)
    whole = path.read_bytes()
    path.write_bytes(whole[:-40])  # killed while writing the fourth record's member

    reader = AnswerCache(path, writable=False)
    assert len(reader.records) == 3 and reader.cut_tail_lines == 1
    assert path.read_bytes() == whole[:-40]  # a reader leaves the file as it is

    writer = AnswerCache(path)
    assert writer.cut_tail_lines == 1 and not writer.done("p|q3|gold")
    writer.add(_record(3))
    assert [r["question_id"] for r in read_answer_records(path)] == ["q0", "q1", "q2", "q3"]
    assert read_members(path).cut_offset is None


def test_a_member_cut_after_its_data_loses_nothing(tmp_path):
    path = tmp_path / "answers.jsonl.gz"
    _write(path, 3)
    path.write_bytes(path.read_bytes()[:-4])  # only the trailer's length field is missing
    writer = AnswerCache(path)
    assert len(writer.records) == 3 and writer.cut_tail_lines == 0
    assert len(gzip.decompress(path.read_bytes()).splitlines()) == 3


def test_an_old_cache_of_small_members_is_merged_when_resumed(tmp_path):
    path = tmp_path / "answers.jsonl.gz"
    _write(path, 7)  # a run that ended before merging
    assert len(read_members(path).members) == 7
    AnswerCache(path)
    assert [m.lines for m in read_members(path).members] == [7]


def test_a_damaged_member_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "answers.jsonl.gz"
    _write(path, 3).compact()
    damaged = bytearray(path.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(AnswerCacheError, match=r"answers\.jsonl\.gz"):
        AnswerCache(path, writable=False)


def test_either_name_finds_the_cache(tmp_path):
    gz = tmp_path / "answers.jsonl.gz"
    _write(gz, 2)
    assert resolve_cache_path(tmp_path / "answers.jsonl") == gz
    assert len(read_answer_records(tmp_path / "answers.jsonl")) == 2
    plain = tmp_path / "old" / "answers.jsonl"
    _write(plain, 2)
    resumed = AnswerCache(tmp_path / "old" / "answers.jsonl.gz")  # an old plain cache resumes in place
    resumed.add(_record(2))
    assert resumed.path == plain and len(plain.read_text().splitlines()) == 3
    (tmp_path / "answers.jsonl").write_text("")
    with pytest.raises(AnswerCacheError, match="Both"):
        resolve_cache_path(gz)


def test_plain_text_named_gz_is_refused(tmp_path):
    path = tmp_path / "answers.jsonl.gz"
    path.write_text(json.dumps(_record(0)) + "\n")
    with pytest.raises(AnswerCacheError, match="not gzip"):
        AnswerCache(path, writable=False)


def test_sealing_a_gzip_cache_keeps_it_gzip_and_whole(tmp_path):
    from icr2_components.evaluation.compare.cache import seal_cache

    path = tmp_path / "answers.jsonl.gz"
    rows = [json.dumps(_record(i)) + "\n" for i in range(150)]  # written before records were sealed
    path.write_bytes(gzip.compress("".join(rows).encode()))
    counts = seal_cache(path)
    assert counts["records"] == 150 and (tmp_path / "answers.jsonl.gz.unsealed").is_file()
    assert [m.lines for m in read_members(path).members] == [100, 50]
    assert [r["question_id"] for r in read_answer_records(path)] == [f"q{i}" for i in range(150)]

