"""The test suite's own plumbing under pytest-xdist: a worker that started the Elasticsearch node or the llama.cpp
server leaves its stop to the controller, which runs it once when the whole run ends (tests/stop_at_run_end.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.stop_at_run_end import FOLDER_VARIABLE, run_recorded_stops, stop_now_or_at_run_end


def _touch(path: Path) -> list[str]:
    return [sys.executable, "-c", f"open({str(path)!r}, 'a').write('stopped\\n')"]


def test_a_worker_records_the_stop_and_the_controller_runs_it_once_at_the_end_plumbing(tmp_path, monkeypatch):
    folder = tmp_path / "started"
    folder.mkdir()
    marker = tmp_path / "stopped.txt"
    monkeypatch.setenv(FOLDER_VARIABLE, str(folder))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")

    stop_now_or_at_run_end(_touch(marker), tmp_path, {}, timeout=60)
    assert not marker.exists()  # not stopped while the other worker may still use it
    assert len(list(folder.glob("*.json"))) == 1

    lines = run_recorded_stops(folder)
    assert marker.read_text() == "stopped\n"  # stopped exactly once
    assert len(lines) == 1 and lines[0].endswith("exit 0"), lines
    assert not folder.exists()


def test_without_xdist_the_stop_runs_at_once_plumbing(tmp_path, monkeypatch):
    marker = tmp_path / "stopped.txt"
    monkeypatch.setenv(FOLDER_VARIABLE, str(tmp_path))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    stop_now_or_at_run_end(_touch(marker), tmp_path, {}, timeout=60)
    assert marker.read_text() == "stopped\n"
    assert not list(tmp_path.glob("*.json"))
