"""Online A/B on ``icr2 serve``: ``closed_book`` and ``vanilla_rag`` over the real llama.cpp server under one model
name, a real ``icr2 serve`` process killed (SIGKILL) with requests in flight and started again: every request
that got a 200 is in the A/B log, a user keeps their arm across the restart, and ``icr2 compare --ab-log``
reports both arms with intervals. The unit tests below check the split, the log's torn-line repair and the report
on logs written here."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from icr2_components.errors import UserInputError
from icr2_components.evaluation.compare.ab_log import compare_ab_log, read_ab_log, repair_torn_tail
from icr2_components.serving.ab_split import ABSplit

ROOT = Path(__file__).resolve().parents[1]
ICR2 = str(Path(sys.executable).parent / "icr2")
QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "What is the largest planet?",
             "Who painted the Mona Lisa?", "What is the boiling point of water?", "Who discovered penicillin?"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def backend_file(llama_server_url, tmp_path_factory) -> str:
    """backends/llama_cpp_server.yaml, pointed at the URL the fixture serves."""
    file = tmp_path_factory.mktemp("backend") / "llama.yaml"
    file.write_text((ROOT / "backends" / "llama_cpp_server.yaml").read_text()
                    .replace("http://127.0.0.1:8089/v1", llama_server_url))
    return str(file)


def start(backend_file: str, log: Path, port: int) -> subprocess.Popen:
    process = subprocess.Popen(
        [ICR2, "serve", "closed_book", "vanilla_rag", "--backend", backend_file, "--port", str(port),
         "--max-new-tokens", "4", "--ab", "closed_book=0.5,vanilla_rag=0.5", "--ab-model", "rag",
         "--ab-log", str(log)],
        cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(process.stdout.read()[-3000:])
        try:
            if httpx.get(f"{url}/health/ready", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    process.kill()
    raise AssertionError("not ready in 300 s")


def ask(url: str, number: int, stream: bool = False) -> tuple[str, str, int | None]:
    """One chat request to the A/B model as user ``u<number % 4>``: (its request id, the user, its status or None
    when the connection failed)."""
    request_id, user = f"ab-{number:03d}", f"u{number % 4}"
    body = {"model": "rag", "user": user, "stream": stream,
            "messages": [{"role": "user", "content": QUESTIONS[number % len(QUESTIONS)]}]}
    try:
        answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120,
                            headers={"x-request-id": request_id})
        if stream and answer.status_code == 200:
            assert answer.text.rstrip().endswith("data: [DONE]"), answer.text[-300:]
        return request_id, user, answer.status_code
    except httpx.TransportError:
        return request_id, user, None


@pytest.mark.llama_server
def test_an_ab_run_killed_and_restarted_loses_no_answered_request(backend_file, tmp_path):
    log, port = tmp_path / "ab.jsonl", free_port()
    url = f"http://127.0.0.1:{port}"
    process = start(backend_file, log, port)
    answered: dict[str, str] = {}
    try:
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(ask, url, n) for n in range(8)]
            for done, future in enumerate(futures, start=1):  # kill once three have their answer: the rest are in
                request_id, user, status = future.result()  # flight or waiting
                if status == 200:
                    answered[request_id] = user
                if done == 3:
                    process.send_signal(signal.SIGKILL)
                    process.wait()
        first_run = dict(answered)
        assert len(first_run) >= 3
        # a kill during a write leaves the last record torn; one is written here as such a kill would leave it
        with open(log, "ab") as handle:
            handle.write(b'{"time": "2026-01-01T00:00:00", "request_id": "torn", "arm": "clo')
        process = start(backend_file, log, port)
        assert httpx.get(f"{url}/v1/models").json()["data"][-1]["id"] == "rag"
        for n in range(100, 105):
            request_id, user, status = ask(url, n, stream=n % 3 == 0)
            assert status == 200, (request_id, status)
            answered[request_id] = user
        # the A/B model uses `user` (it picks the arm), a plain model does not: only there is it named as ignored
        for model, ignored in (("rag", ""), ("closed_book", "user")):
            reply = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
                "model": model, "user": "u1", "max_tokens": 4, "messages": [{"role": "user", "content": QUESTIONS[0]}]})
            assert reply.status_code == 200 and reply.headers["x-icr2-ignored-fields"] == ignored, (model, reply.text)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(60)
    output = process.stdout.read()
    assert "cut 1 torn last line" in output, output[-2000:]
    records, torn = read_ab_log(log)
    assert torn == 0  # the restart cut the torn line
    logged = {record["request_id"]: record for record in records}
    assert set(answered) <= set(logged), sorted(set(answered) - set(logged))  # none lost
    assert {record["arm"] for record in records} == {"closed_book", "vanilla_rag"}
    for record in records:
        assert record["status"] == 200 and record["answer"] is not None and record["latency_ms"] > 0
        if not record["request_id"].endswith(("102",)):  # a streamed reply from the server reports no counts
            assert record["prompt_tokens"] > 0 and record["completion_tokens"] > 0, record
    assert all(record["passages"] for record in records if record["arm"] == "vanilla_rag")
    # sticky: a user's requests all went to one arm, before and after the restart
    arms_by_user: dict[str, set] = {}
    for request_id, user in answered.items():
        arms_by_user.setdefault(user, set()).add(logged[request_id]["arm"])
    assert all(len(arms) == 1 for arms in arms_by_user.values()), arms_by_user
    assert any(request_id in first_run for request_id in logged)

    out = tmp_path / "report"
    compared = subprocess.run([ICR2, "compare", "--ab-log", str(log), "--out", str(out)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
    assert compared.returncode == 0, compared.stderr[-2000:]
    report = json.loads((out / "ab_report.json").read_text())
    assert set(report["arms"]) == {"closed_book", "vanilla_rag"} and report["paired"] is False
    for arm in report["arms"].values():
        low, high = arm["latency_ms"]["ci95"]
        assert low <= arm["latency_ms"]["mean"] <= high
        assert 0 < arm["prompt_tokens"]["n"] <= arm["requests"]  # a streamed reply may have no counts
    (comparison,) = report["comparisons"].values()
    assert comparison["prompt_tokens"]["ci95"] is not None and comparison["latency_ms"]["welch_p"] is not None
    assert "closed_book" in compared.stdout and "vanilla_rag" in compared.stdout


@pytest.mark.unit
def test_the_split_is_sticky_per_user_and_close_to_its_shares():
    split = ABSplit.parse("vanilla_rag=0.9,rap=0.1", "rag", ["vanilla_rag", "rap"])
    assert split.arms == (("vanilla_rag", 0.9), ("rap", 0.1))
    assert all(split.arm_for(f"user-{n}") == split.arm_for(f"user-{n}") for n in range(50))
    arms = [split.arm_for(f"user-{n}") for n in range(4000)]
    assert 0.08 < arms.count("rap") / len(arms) < 0.12
    assert ABSplit.parse("a=9,b=1", "m").arms == (("a", 0.9), ("b", 0.1))


@pytest.mark.unit
@pytest.mark.parametrize("text, served, model, message", [
    ("vanilla_rag=0.9", None, "rag", "at least two arms"),
    ("vanilla_rag=0.9,rap", None, "rag", "PIPELINE=WEIGHT"),
    ("vanilla_rag=0,rap=1", None, "rag", "positive weight"),
    ("vanilla_rag=nan,rap=1", None, "rag", "positive weight"),
    ("a=1,a=2", None, "rag", "named twice"),
    ("vanilla_rag=1,closed_book=1", ["vanilla_rag", "rap"], "rag", "'closed_book' is not a served pipeline"),
    ("vanilla_rag=1,rap=1", ["vanilla_rag", "rap"], "rap", "is a served pipeline's name"),
])
def test_a_malformed_split_is_one_line_naming_it(text, served, model, message):
    with pytest.raises(UserInputError, match=message) as caught:
        ABSplit.parse(text, model, served)
    assert "\n" not in str(caught.value)


def record(arm: str, n: int, latency: float, prompt: int, answer: str = "Paris") -> str:
    return json.dumps({"request_id": f"r{arm}{n}", "arm": arm, "status": 200, "latency_ms": latency,
                       "prompt_tokens": prompt, "completion_tokens": 4, "query": f"q{n}", "answer": answer}) + "\n"


@pytest.mark.unit
def test_a_torn_last_line_is_cut_and_counted(tmp_path):
    log = tmp_path / "ab.jsonl"
    log.write_text(record("a", 1, 10.0, 50) + record("b", 2, 12.0, 60) + '{"request_id": "x", "ar')
    assert read_ab_log(log)[1] == 1 and len(read_ab_log(log)[0]) == 2
    assert repair_torn_tail(log) == 1
    assert log.read_text().endswith("\n") and read_ab_log(log) == (read_ab_log(log)[0], 0)
    assert repair_torn_tail(log) == 0 and repair_torn_tail(tmp_path / "absent.jsonl") == 0


@pytest.mark.unit
def test_the_ab_report_gives_each_arm_intervals_and_unpaired_tests(tmp_path):
    log = tmp_path / "ab.jsonl"
    lines = [record("a", n, 100.0 + n, 50 + n % 3, "Paris" if n % 4 else "Lyon") for n in range(20)]
    lines += [record("b", n, 150.0 + n, 300 + n % 5, "Paris" if n % 2 else "Rome") for n in range(12)]
    log.write_text("".join(lines))
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"query": f"q{n}", "answers": ["Paris"]}) + "\n" for n in range(20)))
    report = compare_ab_log(log, labels=labels)
    assert report["baseline"] == "a" and report["arms"]["a"]["requests"] == 20 and report["arms"]["b"]["requests"] == 12
    assert report["arms"]["a"]["answer_match"]["method"] == "wilson"
    assert report["arms"]["a"]["answer_match"]["mean"] == pytest.approx(15 / 20)
    comparison = report["comparisons"]["b vs a"]
    assert comparison["prompt_tokens"]["difference"] > 200 and comparison["prompt_tokens"]["welch_p"] < 0.001
    low, high = comparison["latency_ms"]["ci95"]
    assert low < comparison["latency_ms"]["difference"] < high and comparison["latency_ms"]["mann_whitney_p"] < 0.01
    assert comparison["answer_match"]["difference"] == pytest.approx(6 / 12 - 15 / 20)
    assert comparison["answer_match"]["ci95"][0] < comparison["answer_match"]["difference"]
    with pytest.raises(UserInputError, match="not an arm"):
        compare_ab_log(log, baseline="c")


@pytest.mark.unit
@pytest.mark.parametrize("flags, message", [
    (["--ab", "closed_book=1,oracle=1"], "missing --ab-model, --ab-log"),
    (["--ab", "closed_book=1,oracle=1", "--ab-model", "rag"], "missing --ab-log"),
    (["--ab", "closed_book=1,vanilla_rag=1", "--ab-model", "rag", "--ab-log", "{tmp}/ab.jsonl"],
     "'vanilla_rag' is not a served pipeline"),
    (["--log-content"], "--log-content needs --log-requests"),
])
def test_serve_refuses_incomplete_observability_flags_before_loading(flags, message, tmp_path):
    from icr2_components.cli import build_parser

    args = build_parser().parse_args(["serve", "closed_book", "oracle", "--port", str(free_port()),
                                      *[flag.replace("{tmp}", str(tmp_path)) for flag in flags]])
    with pytest.raises(UserInputError, match=message) as caught:
        args.handler(args)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "ab.jsonl").exists()
