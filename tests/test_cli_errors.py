"""Errors at the ``icr2`` edge: each error a user can cause is ONE line on stderr, ``icr2 <command>: error: ...``,
naming the input and what to do, with exit status 1 and no traceback; ``--debug`` (or ``ICR2_DEBUG=1``) shows the
traceback. The CLI cases run the real ``icr2`` entry point in a subprocess on real files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from icr2_components.pipeline_loading import PipelineLoadError, load_pipeline

ROOT = Path(__file__).resolve().parents[1]
ICR2 = Path(sys.executable).parent / "icr2"
BAD_YAML = "components:\n  reader: [1, 2\n  prompt: 3\n"  # an unclosed flow sequence: the error is on line 3


def icr2(
    *args: str, cwd: Path = ROOT, debug_env: str | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    command = [str(ICR2)] if ICR2.exists() else [sys.executable, "-m", "icr2_components.cli"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HAYSTACK_TELEMETRY_ENABLED": "False"}
    env.pop("ICR2_DEBUG", None)
    if debug_env is not None:
        env["ICR2_DEBUG"] = debug_env
    return subprocess.run(command + list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def one_error_line(result: subprocess.CompletedProcess, command: str) -> str:
    """Exit 1, exactly one line on stderr, no traceback, in the documented format; returns the line."""
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert lines[0].startswith(f"icr2 {command}: error: "), lines[0]
    return lines[0]


def test_elasticsearch_down_during_search_is_one_line_naming_the_url_and_how_to_start_it(tmp_path):
    config = tmp_path / "es-down.yaml"  # the format of indexing/kilt-sample-elasticsearch.yaml, on a closed port
    config.write_text(
        "name: es-down\n"
        "store:\n  type: elasticsearch\n  hosts: http://127.0.0.1:9\n  index: icr2-test-es-down\n"
        "  request_timeout: 2\n  max_retries: 0\n"
        "corpus:\n  path: sample\n"
        "embedding:\n  enabled: false\n"
    )
    line = one_error_line(icr2("search", "--config", str(config), "--query", "who wrote hamlet", "--method", "bm25"),
                          "search")
    assert "Elasticsearch is unreachable at http://127.0.0.1:9" in line
    assert "bash scripts/elasticsearch.sh start" in line


def test_unknown_model_says_the_hub_is_offline_and_lists_the_bundled_aliases(tmp_path):
    data = tmp_path / "questions.jsonl"
    data.write_text('{"question": "Who wrote Hamlet?", "ground_truth": ["Shakespeare"], "needs_retrieval": false, '
                    '"data_source": "test"}\n')
    line = one_error_line(icr2("eval-gate", str(data), "--model", "no-such-org/no-such-model", "--decisions-only"),
                          "eval-gate")
    assert "'no-such-org/no-such-model'" in line
    assert "hub is offline here (HF_HUB_OFFLINE=1)" in line
    assert "all-minilm-l6-v2" in line and "smollm2-135m-instruct" in line
    assert "huggingface.co" not in line  # not transformers' network error


def test_fine_tuned_reader_before_training_says_which_recipe_to_train(tmp_path):
    # a copy of the repository's layout without runs/ (so the test holds even where the model was trained)
    for folder, name in (("pipelines", "fine_tuned_reader.yaml"), ("training", "smollm2_cpu_rta.yaml"),
                         ("indexing", "kilt-sample.yaml")):
        (tmp_path / folder).mkdir(exist_ok=True)
        shutil.copy(ROOT / folder / name, tmp_path / folder / name)
    line = one_error_line(icr2("serve", "pipelines/fine_tuned_reader.yaml", cwd=tmp_path), "serve")
    assert "pipelines/fine_tuned_reader.yaml" in line and "component 'reader'" in line
    assert "runs/smollm2-cpu-rta does not exist" in line
    assert "`icr2 train --config training/smollm2_cpu_rta.yaml`" in line
    assert "huggingface" not in line.lower()  # the path was never read as a hub id


@pytest.mark.unit
def test_load_pipeline_yaml_syntax_error_names_file_and_line_without_the_allowlist_text(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(BAD_YAML)
    with pytest.raises(PipelineLoadError) as caught:
        load_pipeline(path)
    message = str(caught.value)
    assert message.startswith(f"{path} is not valid YAML: line 3, column ")
    assert "allowlist" not in message.lower() and "allowed_modules" not in message
    assert "\n" not in message
    # the allowlist text stays for what it is about: a module the allowlist refuses
    foreign = tmp_path / "foreign.yaml"
    foreign.write_text("components:\n  x:\n    type: os.system\n    init_parameters: {}\nconnections: []\n")
    with pytest.raises(PipelineLoadError, match="HAYSTACK_DESERIALIZATION_ALLOWLIST"):
        load_pipeline(foreign)


@pytest.mark.parametrize("command", ["serve", "compare"])
def test_yaml_syntax_error_through_the_cli_is_one_line_with_file_and_line(tmp_path, command):
    path = tmp_path / "broken.yaml"
    path.write_text(BAD_YAML)
    args = (
        ["serve", str(path)]
        if command == "serve"
        else ["compare", "--pipelines", str(path), "--out", str(tmp_path / "out")]
    )
    line = one_error_line(icr2(*args), command)
    assert f"{path} is not valid YAML: line 3, column" in line


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_shows_the_traceback(tmp_path, how):
    path = tmp_path / "broken.yaml"
    path.write_text(BAD_YAML)
    result = icr2("--debug", "serve", str(path)) if how == "flag" else icr2("serve", str(path), debug_env="1")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "yaml.parser.ParserError" in result.stderr


@pytest.mark.unit
def test_interrupt_and_unexpected_errors_are_one_line(monkeypatch, capsys):
    """In-process: Ctrl-C exits 130 with one line; a bug (an exception we did not plan for) says so, exit 1."""
    from icr2_components import cli
    from icr2_components.commands import search

    monkeypatch.delenv("ICR2_DEBUG", raising=False)

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(search, "run", interrupted)
    assert cli.main(["search", "--query", "x"]) == 130
    assert capsys.readouterr().err == "icr2 search: interrupted\n"

    def broken(args):
        raise KeyError("passages")

    monkeypatch.setattr(search, "run", broken)
    assert cli.main(["search", "--query", "x"]) == 1
    assert capsys.readouterr().err == (
        "icr2 search: error: KeyError: 'passages' (unexpected error; run with --debug for the traceback)\n")
    with pytest.raises(KeyError):
        cli.main(["--debug", "search", "--query", "x"])


@pytest.mark.unit
def test_elasticsearch_api_error_is_its_status_and_reason():
    """An error answered by Elasticsearch (here the 400 of a query over maxClauseCount) is its status and reason."""
    import elastic_transport
    import elasticsearch

    from icr2_components.cli import describe_error

    meta = elastic_transport.ApiResponseMeta(status=400, http_version="1.1", headers=elastic_transport.HttpHeaders(),
                                             duration=0.1, node=elastic_transport.NodeConfig("http", "127.0.0.1", 9200))
    reason = "Query contains too many nested clauses; maxClauseCount is set to 16384"
    body = {"error": {"root_cause": [{"type": "too_many_nested_clauses", "reason": reason}],
                      "type": "search_phase_execution_exception", "reason": "all shards failed"}, "status": 400}
    message, expected = describe_error(elasticsearch.BadRequestError("search_phase_execution_exception", meta, body))
    assert expected
    assert message == ("Elasticsearch at http://127.0.0.1:9200 answered 400 search_phase_execution_exception: "
                       f"all shards failed; {reason}.")
