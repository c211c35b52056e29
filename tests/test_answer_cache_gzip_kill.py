"""A real process appending to a gzip answer cache, SIGKILLed at arbitrary moments (mid-member, mid-merge): the
records before the cut read back in order and the next writer appends after them."""

import signal
import subprocess
import sys
import time

from icr2_components.evaluation.compare.cache import AnswerCache, read_answer_records
from icr2_components.records.gzip_lines import read_members

WRITER = """
import sys
from icr2_components.evaluation.compare.cache import AnswerCache
cache = AnswerCache(sys.argv[1])
start = len(cache.records)
for i in range(start, start + 100000):
    cache.add({"key": f"p|q{i}|gold", "question_id": f"q{i}", "answer": "words " * (i % 50)})
"""


def test_a_writer_killed_at_any_moment_leaves_a_cache_that_resumes(tmp_path):
    """Five kills, each at another moment of a writer's life (the file grows between them)."""
    path = tmp_path / "answers.jsonl.gz"
    for round_ in range(5):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not path.exists() or path.stat().st_size < 2000 * (round_ + 1)):
            time.sleep(0.005)
        time.sleep(0.01 * round_)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        reader = AnswerCache(path, writable=False)
        ids = [r["question_id"] for r in reader]
        assert ids == [f"q{i}" for i in range(len(ids))] and reader.cut_tail_lines <= 1
        resumed = AnswerCache(path)  # cuts a cut member off, merges the small ones
        assert [r["question_id"] for r in resumed] == ids
        assert read_members(path).cut_offset is None
    assert len(read_answer_records(path)) > 0
