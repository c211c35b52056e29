"""scripts/elasticsearch.sh's cluster options are checked before anything starts (no node is started here;
tests/test_elasticsearch_cluster.py starts a real 3-node cluster)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "elasticsearch.sh"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("start", "--nodes", "3", "--http-port-base", "9200"), "include the single node's port 9200"),
        (
            ("start", "--nodes", "3", "--http-port-base", "9301", "--transport-port-base", "9302"),
            "overlap the transport ports",
        ),
        (("start", "--nodes", "0x"), "--nodes must be a number from 1 to 9"),
        (("start", "--nodes", "3", "--heap", "lots"), "--heap must look like 256m or 1g"),
        (("start", "--nodes", "3", "--cluster-name", "Bad Name"), "--cluster-name must be lower-case"),
        (("start", "--wipe"), "--wipe applies to a cluster (--nodes N) only"),
        (("start", "--bogus"), "unknown option '--bogus'"),
    ],
)
def test_bad_cluster_options_are_refused_with_one_line(args, message):
    result = run(*args)
    assert result.returncode != 0
    assert message in result.stderr


def test_status_of_a_cluster_that_is_not_running_lists_its_nodes_and_fails():
    result = run(
        "status",
        "--nodes",
        "2",
        "--http-port-base",
        "9296",
        "--transport-port-base",
        "9396",
        "--cluster-name",
        "icr2-never-started",
    )
    assert result.returncode == 1
    assert result.stdout.splitlines()[:2] == [
        "icr2-never-started-1 http://127.0.0.1:9296 -",
        "icr2-never-started-2 http://127.0.0.1:9297 -",
    ]
