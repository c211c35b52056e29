"""Cohen's kappa of a judge metric with answer match: scikit-learn's, with a bootstrap interval, on real answers;
and a judgement is redone when what it judged changed (the answer redone), not when it did not."""

from __future__ import annotations

import json

import pytest
import yaml
from sklearn.metrics import cohen_kappa_score

from icr2_components.evaluation.compare.cache import cache_lines
from icr2_components.evaluation.judging import RagasJudge, judge_answers
from icr2_components.evaluation.judging.agreement import judge_agreement, kappa_interval
from icr2_components.evaluation.judging.judgements import JUDGEMENTS_FILE
from icr2_components.testing import FixedAnswerServer

# a judge that writes back a question: answer relevance scores it, the rating metrics read its "0"
REPLY = json.dumps({"question": "Who received the first Nobel Prize in Physics?", "noncommittal": 0})
COMPLETION = json.dumps({"id": "fixed", "object": "chat.completion", "created": 0, "model": "fixed",
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY},
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16}}).encode()


@pytest.mark.unit
def test_kappa_is_scikit_learns_with_an_interval_around_it_and_undefined_said_as_such():
    judge = [1, 1, 0, 1, 0, 0, 1, 1, 0, 1, 0, 1]
    match = [1, 0, 0, 1, 0, 1, 1, 1, 0, 1, 0, 0]
    result = kappa_interval(judge, match, seed=0, resamples=999)
    assert result["kappa"] == cohen_kappa_score(judge, match) and result["n"] == 12
    low, high = result["ci95"]
    assert -1 <= low < result["kappa"] < high <= 1
    assert result["confusion"] == {"judge_1_match_1": 5, "judge_1_match_0": 2, "judge_0_match_1": 1,
                                   "judge_0_match_0": 4}
    assert kappa_interval([1, 1, 1], [1, 1, 1])["kappa"] is None  # both constant: undefined, not 0 or 1
    assert kappa_interval([], [])["n"] == 0


def record(answer: str, question_id: str = "q1") -> dict:
    return {"key": f"h|{question_id}|gold", "pipeline": "oracle", "pipeline_hash": "h", "question_id": question_id,
            "query": "who got the first nobel prize in physics", "context_type": "gold", "reads_context": True,
            "answers": ["Röntgen", "Wilhelm Conrad Röntgen"], "answer": answer, "shown_ids": ["p1"],
            "shown_passages": ["The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Conrad Röntgen."]}


def test_a_redone_answer_is_judged_again_and_agreement_counts_its_answers(tmp_path):
    file = tmp_path / "judge.yaml"
    with FixedAnswerServer(200, COMPLETION, "application/json") as server:
        file.write_text(yaml.safe_dump({"kind": "served", "served_model": {
            "api_base_url": server.url, "model": "fixed", "context_length": 8192, "max_retries": 0,
            "tokenizer": "smollm2-135m-instruct"}}))
        judge = RagasJudge(str(file))
        first = [record("Röntgen won it in 1901, they say."), record("Marie Curie, in 1903.", "q2")]
        done = judge_answers(first, judge, tmp_path, metrics="groundedness,answer_relevance", progress=False)
        assert done["counters"]["judged"] == 4
        redone = [record("Röntgen won it in 1901, they say."), record("It was Röntgen.", "q2")]
        again = judge_answers(redone, judge, tmp_path, metrics="groundedness,answer_relevance", progress=False)
    assert again["counters"] == {"judged": 2, "cached": 2, "stale": 2, "unparsable": 0, "failed_requests": 0}
    lines = [json.loads(line) for line in cache_lines(tmp_path / JUDGEMENTS_FILE)]
    assert len(lines) == 6 and sum("replaces" in line for line in lines) == 2  # the redone pair replaces the old
    agreement = judge_agreement(redone, again)
    # groundedness: ragas reads this judge's "0" as a rating of 0 for both; answer match is 1 for both
    assert agreement["groundedness"]["confusion"]["judge_0_match_1"] == 2 and agreement["groundedness"]["n"] == 2
    assert agreement["answer_relevance"]["judge_positive_rate"] == 1.0  # the question written back is close
