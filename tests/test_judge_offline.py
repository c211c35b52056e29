"""The judge reaches nothing but its backend: no OpenAI, no model hub, no analytics (every socket connection is
watched), and a judge reply ragas can read is scored: answer relevance embeds the judge's question with the
bundled all-MiniLM-L6-v2 (a real HTTP server answers every request with one JSON reply)."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest
import yaml

from icr2_components.evaluation.judging import RagasJudge

QUESTION = "who got the first nobel prize in physics"
WRITTEN_BACK = {"question": "Who received the first Nobel Prize in Physics?", "noncommittal": 0}


def completion(text: str) -> bytes:
    return json.dumps({"id": "fixed", "object": "chat.completion", "created": 0, "model": "fixed",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16}}).encode()


@pytest.fixture
def connections(monkeypatch):
    """Every address a socket connects to in the test (a connection off this machine is refused)."""
    seen: list = []
    original = socket.socket.connect

    def connect(self, address):
        seen.append(address)
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise OSError(f"the judge tried to reach {address}")
        return original(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    return seen


def judge_file(folder: Path, url: str) -> Path:
    file = folder / "judge.yaml"
    file.write_text(yaml.safe_dump({"kind": "served", "served_model": {
        "api_base_url": url, "model": "fixed", "context_length": 8192, "max_retries": 0, "timeout_s": 10,
        "tokenizer": "smollm2-135m-instruct"}}))
    return file


def test_the_judge_asks_only_its_backend_and_scores_a_reply_ragas_can_read(tmp_path, connections):
    from icr2_components.testing import FixedAnswerServer

    with FixedAnswerServer(200, completion(json.dumps(WRITTEN_BACK)), "application/json") as server:
        judge = RagasJudge(str(judge_file(tmp_path, server.url)))
        passages = ["The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Conrad Röntgen, of Germany."]
        relevance = asyncio.run(judge.judge("answer_relevance", QUESTION, "It went to Röntgen in 1901.", passages))
        grounded = asyncio.run(judge.judge("groundedness", QUESTION, "It went to Röntgen in 1901.", passages))
        port = server.server.server_address[1]
    assert not relevance.unparsable and relevance.value > 0.8  # cosine of the question and the one written back
    assert relevance.replies == [json.dumps(WRITTEN_BACK)]
    # the rating prompts read the first digit they find: this reply's "0" is a rating of 0, as ragas reads it
    assert grounded.value == 0.0 and len(grounded.replies) == 2
    assert connections and all(address[1] == port for address in connections if isinstance(address, tuple))
