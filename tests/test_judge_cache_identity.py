"""A cached judgement stands for what decided it: the judge (model and server), the question's text, the answer
and the passages shown; never the gold labels, which the judge metrics do not read.

The judge is a real HTTP server giving one fixed chat completion (``icr2_components.testing.FixedAnswerServer``):
plumbing for the cache, not a judgement of quality.
"""

from __future__ import annotations

import json

import yaml

from icr2_components.evaluation.compare.cache import cache_lines
from icr2_components.evaluation.judging import RagasJudge, judge_answers
from icr2_components.evaluation.judging.judgements import JUDGEMENTS_FILE
from icr2_components.testing import FixedAnswerServer

REPLY = json.dumps({"question": "Who received the first Nobel Prize in Physics?", "noncommittal": 0})
COMPLETION = json.dumps({"id": "fixed", "object": "chat.completion", "created": 0, "model": "fixed",
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY},
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16}}).encode()
METRICS = "groundedness,answer_relevance"


def record(question_id: str, query: str, answers: list[str]) -> dict:
    return {"key": f"h|{question_id}|gold", "pipeline": "oracle", "pipeline_hash": "h", "question_id": question_id,
            "query": query, "context_type": "gold", "reads_context": True, "answers": answers, "gold_ids": ["p1"],
            "answer": "Röntgen, in 1901.", "shown_ids": ["p1"],
            "shown_passages": ["The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Conrad Röntgen."]}


def judge_file(folder, url: str, model: str):
    file = folder / f"{model}.yaml"
    file.write_text(yaml.safe_dump({"kind": "served", "served_model": {
        "api_base_url": url, "model": model, "context_length": 8192, "max_retries": 0,
        "tokenizer": "smollm2-135m-instruct"}}))
    return str(file)


def test_fixed_reply_judge_cache_is_keyed_by_judge_question_answer_and_passages_not_gold(tmp_path):
    records = [record("q1", "who got the first nobel prize in physics", ["Röntgen"]),
               record("q2", "when was the first nobel prize in physics given", ["1901"])]
    cache = tmp_path / JUDGEMENTS_FILE
    with FixedAnswerServer(200, COMPLETION, "application/json") as server:
        judge = RagasJudge(judge_file(tmp_path, server.url, "fixed"))
        first = judge_answers(records, judge, tmp_path, metrics=METRICS, progress=False)
        assert first["counters"]["judged"] == 4
        written = cache.read_bytes()
        # other gold answers and gold passage ids: the same judgements, nothing asked, nothing written
        regold = [{**r, "answers": ["Marie Curie"], "gold_ids": ["p7"]} for r in records]
        again = judge_answers(regold, judge, tmp_path, metrics=METRICS, progress=False)
        assert again["counters"] == {"judged": 0, "cached": 4, "stale": 0, "unparsable": 0, "failed_requests": 0}
        assert cache.read_bytes() == written and again["scores"] == first["scores"]
        # a reworded question: its two judgements are asked again, the other question's stand
        reworded = [records[0], {**records[1], "query": "in which year was the first physics nobel prize given"}]
        third = judge_answers(reworded, judge, tmp_path, metrics=METRICS, progress=False)
        assert third["counters"] == {"judged": 2, "cached": 2, "stale": 2, "unparsable": 0, "failed_requests": 0}
        # another judge model: a judgement of its own for every answer (the judge's identity is in the key)
        other = RagasJudge(judge_file(tmp_path, server.url, "fixed-2"))
        assert other.hash != judge.hash
        fourth = judge_answers(reworded, other, tmp_path, metrics=METRICS, progress=False)
        assert fourth["counters"]["judged"] == 4 and fourth["counters"]["cached"] == 0
    lines = [json.loads(line) for line in cache_lines(cache)]
    assert len(lines) == 4 + 2 + 4 and sum("replaces" in line for line in lines) == 2
