"""Served backends fail early and say why: values out of range are refused when the backend file is read (not after
every retry), a server answering something that is not an LLM server is named as such, and an ``icr2 compare`` whose
every request failed exits non-zero with the reason. The failing server is a real HTTP server on a local port
(answering every request with a fixed page or status), not a patched client."""

import time

import pytest
import yaml

from icr2_components.backends import BackendError
from icr2_components.backends.pipelines import backend_from_dict
from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import read_answer_records
from icr2_components.models.served_model import ServedModelError, ServedTokenizer
from icr2_components.testing import FixedAnswerServer

SERVED = {"kind": "served", "served_model": {"api_base_url": "http://127.0.0.1:8089/v1",
                                             "model": "smollm2-135m-instruct"}}


def served(**changes):
    return {**SERVED, "served_model": {**SERVED["served_model"], **changes}}


@pytest.mark.parametrize(("values", "message"), [
    (served(api_base_url="http://127.0.0.1:99999/v1"), r"port must be from 1 to 65535, got '99999'"),
    (served(api_base_url="http://127.0.0.1:0/v1"), r"port must be from 1 to 65535, got '0'"),
    (served(api_base_url="http://127.0.0.1:80a/v1"), r"port must be from 1 to 65535, got '80a'"),
    (served(api_base_url="http:///v1"), r"api_base_url must name a host"),
    (served(timeout_s=0), r"timeout_s must be a number of seconds above 0 and at most 3600"),
    (served(timeout_s=86400 * 7), r"timeout_s must be .* at most 3600"),
    # refused by the strict layer before the range check, naming the key and the value
    (served(timeout_s=float("nan")), r"key 'timeout_s' is nan .*NaN and infinity are refused"),
    (served(timeout_s=float("inf")), r"key 'timeout_s' is inf .*NaN and infinity are refused"),
    (served(max_retries=-1), r"max_retries must be a whole number from 0 to 20"),
    (served(max_retries=1000), r"max_retries must be a whole number from 0 to 20"),
    (served(context_length=0), r"context_length must be a whole number of tokens from 1 to 10,000,000"),
    (served(context_length=10**12), r"context_length must be a whole number of tokens from 1 to 10,000,000"),
    ({**SERVED, "max_concurrency": 100_000}, r"max_concurrency must be a whole number from 1 to 256"),
    ({**SERVED, "max_concurrency": 0}, r"max_concurrency must be a whole number from 1 to 256"),
])
def test_values_out_of_range_are_refused_when_the_backend_file_is_read(values, message):
    with pytest.raises((BackendError, ValueError), match=message):
        backend_from_dict(values, "backends/test.yaml")


def test_the_cli_refuses_port_99999_at_once(tmp_path, capsys):
    backend = tmp_path / "bad_port.yaml"
    backend.write_text(yaml.safe_dump(served(api_base_url="http://127.0.0.1:99999/v1")))
    started = time.perf_counter()
    code = main(["compare", "--pipelines", "pipelines/closed_book.yaml", "--limit", "1", "--context-types", "open",
                 "--backend", str(backend), "--out", str(tmp_path / "out"), "--no-progress"])
    assert code == 1 and time.perf_counter() - started < 30  # not after retries to a port that cannot exist
    err = capsys.readouterr().err
    assert "port must be from 1 to 65535, got '99999'" in err and "Traceback" not in err


def test_a_server_answering_garbage_is_named_as_not_an_llm_server():
    with FixedAnswerServer(200, b"<html><body>Welcome to nginx!</body></html>") as server, \
            pytest.raises(ServedModelError) as caught:
        ServedTokenizer(server.url, "smollm2-135m-instruct", max_retries=0).count("What is the capital of France?")
    message = str(caught.value)
    assert "answered its tokenize endpoints with something that is not a token list" in message
    assert "/tokenize -> 200 no JSON" in message and "/extras/tokenize -> 200 no JSON" in message
    assert "Check that api_base_url points at the LLM server" in message
    with FixedAnswerServer(200, b'{"status": "ok"}', "application/json") as server, \
            pytest.raises(ServedModelError, match=r"/tokenize -> 200 \"{'status': 'ok'}\""):
        ServedTokenizer(server.url, "smollm2-135m-instruct", max_retries=0).count("x")


def test_a_compare_whose_every_request_failed_exits_non_zero_with_the_reason(tmp_path, capsys):
    with FixedAnswerServer(503, b'{"error": {"message": "the model is loading"}}', "application/json") as server:
        backend = tmp_path / "down.yaml"
        backend.write_text(yaml.safe_dump(served(api_base_url=server.url, timeout_s=5, max_retries=0,
                                                 context_length=2048, tokenizer="smollm2-135m-instruct")))
        out = tmp_path / "out"
        code = main(["compare", "--pipelines", "pipelines/closed_book.yaml", "--limit", "2", "--context-types",
                     "open", "--backend", str(backend), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1
    assert "every one of the 2 answers requested failed, none was answered" in err
    assert "answered 503" in err and "the model is loading" in err and "Traceback" not in err
    records = read_answer_records(out / "answers.jsonl")
    assert len(records) == 2 and all(r["failed_request"] for r in records)
