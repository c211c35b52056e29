"""Stopping what a test session started, once every pytest-xdist worker is done with it.

A worker that starts the Elasticsearch node or the llama.cpp server must not stop it when its own share of the tests
ends: another worker may still be using it. Under xdist the worker records the stop command in a folder the
controller made (``ICR2_TESTS_STARTED_DIR``), and the controller runs the recorded commands when the whole run
ends (tests/conftest.py's ``pytest_unconfigure``). Without xdist the command runs at once, as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

FOLDER_VARIABLE = "ICR2_TESTS_STARTED_DIR"


def stop_now_or_at_run_end(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> None:
    """Run ``argv`` now, or, in an xdist worker, leave it for the controller to run when the run ends."""
    folder = os.environ.get(FOLDER_VARIABLE)
    if os.environ.get("PYTEST_XDIST_WORKER") and folder:
        record = {"argv": argv, "cwd": str(cwd), "env": env, "timeout": timeout}
        Path(folder, f"{uuid.uuid4().hex}.json").write_text(json.dumps(record))
        return
    subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def run_recorded_stops(folder: Path) -> list[str]:
    """Run the stop commands the workers recorded (each once); returns what each printed, for the report."""
    outputs = []
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        result = subprocess.run(record["argv"], cwd=record["cwd"], env=record["env"], capture_output=True,
                                text=True, timeout=record["timeout"], check=False)
        outputs.append(f"{' '.join(record['argv'][1:])}: exit {result.returncode}")
        path.unlink()
    folder.rmdir()
    return outputs
