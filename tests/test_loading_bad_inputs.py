"""Bad input on the loading side, through the ``icr2`` command a user runs, with default settings.

- a corpus holding a record with a lone surrogate escape (``"\\ud800"``, not valid Unicode: the tokenizer and the
  UTF-8 encoder refuse it) and other bad records among real KILT articles: each bad record is skipped, counted and
  named by file and line, and the load indexes every good passage;
- ``corpus.path`` or ``store.persist_path`` that is a directory, or under a file, fails before any work with one
  line naming the path, and leaves no temporary file; a training ``output_dir`` that is a file likewise;
- appends to a JSON-lines file start on a fresh line after a cut last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.kilt.sample import build_sample
from icr2_components.records.integrity import open_for_append

ROOT = Path(__file__).resolve().parents[1]


def _icr2(*args: str, cwd: Path = ROOT, cache: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HAYSTACK_TELEMETRY_ENABLED="False")
    if cache is not None:
        env["ICR2_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-m", "icr2_components.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _real_articles(n: int) -> list[str]:
    """The first ``n`` lines of the bundled sample corpus (real KILT articles built from ../shared/data)."""
    with open(build_sample().corpus, encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(n)]


def _config(tmp_path: Path, **store) -> Path:
    """The shipped in-memory config (indexing/kilt-sample.yaml, default settings) on another corpus and file."""
    values = yaml.safe_load((ROOT / "indexing" / "kilt-sample.yaml").read_text())
    values["corpus"]["path"] = str(tmp_path / "corpus.jsonl")
    values["store"] = {**values.get("store", {}), "persist_path": str(tmp_path / "index.json"), **store}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_a_lone_surrogate_and_other_bad_records_are_skipped_named_and_the_load_goes_on(tmp_path, cache_after_setup):
    good = _real_articles(12)
    article = json.loads(good[3])
    surrogate_in_text = json.dumps({**article, "wikipedia_id": "99000001", "text": ["Lone \ud800 surrogate"]})
    surrogate_in_title = json.dumps({**article, "wikipedia_id": "99000002", "wikipedia_title": "Bad \udfff title"})
    assert "\\ud800" in surrogate_in_text and "\\udfff" in surrogate_in_title  # escapes in the file, as in the wild
    pair = json.dumps({**article, "wikipedia_id": "99000003", "text": ["An emoji \U0001F600 is a valid pair."]})
    lines = [*good[:4], surrogate_in_text, *good[4:8], "{not json", surrogate_in_title, *good[8:], pair]
    (tmp_path / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = sum(1 for _ in KiltKnowledgeSource(tmp_path / "corpus.jsonl").documents())

    result = _icr2("index", "--config", str(_config(tmp_path)), "--report", str(tmp_path / "report.json"),
                   "--no-progress", cache=cache_after_setup)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    skips = report["skips"]
    assert skips["source"] == str(tmp_path / "corpus.jsonl")
    reason = "lone surrogate escape (not valid Unicode)"
    assert skips["counts"] == {reason: 2, "malformed JSON": 1}
    assert skips["examples"][reason] == ["line 5: in text[0]", "line 11: in wikipedia_title"]
    assert report["passages_streamed"] == report["documents_in_store"] == expected
    # every good article, the valid surrogate pair included, is in the store
    stored = json.loads((tmp_path / "index.json").read_text())
    wikipedia_ids = {d["meta"]["wikipedia_id"] for d in stored["documents"]}
    assert wikipedia_ids == {json.loads(line)["wikipedia_id"] for line in good} | {"99000003"}
    printed = result.stdout.replace("\n", "")
    assert "line 5" in printed and "line 11" in printed and str(tmp_path / "corpus.jsonl") in printed


@pytest.mark.parametrize("case", ["corpus_is_a_directory", "persist_path_is_a_directory", "persist_path_under_a_file"])
def test_unusable_paths_fail_in_one_line_before_any_work_and_leave_no_temporary_file(tmp_path, case):
    (tmp_path / "corpus.jsonl").write_text("\n".join(_real_articles(3)) + "\n", encoding="utf-8")
    (tmp_path / "a_file").write_text("not a folder")
    if case == "corpus_is_a_directory":
        config = _config(tmp_path)
        values = yaml.safe_load(config.read_text())
        values["corpus"]["path"] = str(tmp_path)
        config.write_text(yaml.safe_dump(values))
        named = f"corpus.path {tmp_path} is a directory"
    elif case == "persist_path_is_a_directory":
        (tmp_path / "index_folder").mkdir()
        config = _config(tmp_path, persist_path=str(tmp_path / "index_folder"))
        named = f"store.persist_path cannot be written: {tmp_path / 'index_folder'} is a directory"
    else:
        config = _config(tmp_path, persist_path=str(tmp_path / "a_file" / "sub" / "index.json"))
        named = f"store.persist_path cannot be written: {tmp_path / 'a_file'} is a file"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    started = time.monotonic()
    result = _icr2("index", "--config", str(config), "--no-progress", cache=tmp_path / "cache")
    seconds = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    message = result.stderr.strip().splitlines()
    assert len(message) == 1 and message[0].startswith("icr2 index: error: ") and named in message[0], message
    assert "Traceback" not in result.stderr
    assert seconds < 60  # no model loaded, nothing read or embedded (the load itself takes minutes here)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.name != "cache" and "cache" not in p.parts) == [
        n for n in before if n != "cache"
    ]
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_training_output_dir_that_is_a_file_fails_in_one_line_before_the_model_loads(tmp_path):
    (tmp_path / "out").write_text("a file")
    recipe = yaml.safe_load((ROOT / "training" / "smollm2_cpu_rta_lora.yaml").read_text())
    recipe["output_dir"] = str(tmp_path / "out")
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    result = _icr2("train", "--config", str(tmp_path / "recipe.yaml"), "--no-progress")
    assert result.returncode == 1, result.stdout + result.stderr
    message = result.stderr.strip().splitlines()
    assert len(message) == 1 and f"output_dir cannot be used: {tmp_path / 'out'} is a file, not a folder" in message[0]
    assert (tmp_path / "out").read_text() == "a file"


@pytest.mark.unit
def test_an_append_after_a_cut_last_line_starts_on_a_fresh_line(tmp_path):
    path = tmp_path / "failures.jsonl"
    path.write_text('{"id": "a", "status": 400}\n{"id": "b", "sta')  # a kill mid-write
    with open_for_append(path) as handle:
        handle.write(json.dumps({"id": "c", "status": 400}) + "\n")
    lines = path.read_text().splitlines()
    assert lines == ['{"id": "a", "status": 400}', '{"id": "b", "sta', '{"id": "c", "status": 400}']
    with open_for_append(tmp_path / "new" / "f.jsonl") as handle:  # its folder is made
        handle.write("{}\n")
    assert (tmp_path / "new" / "f.jsonl").read_text() == "{}\n"
