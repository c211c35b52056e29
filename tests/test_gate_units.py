"""Pure parts of the adaptive-retrieval gate: prompts, reply parsing, pools, metrics, record reading, validation."""

import datetime as dt
import json
import math
from pathlib import Path

import pytest

from icr2_components.evaluation.gates.gate_eval import GateEvalRow, read_retrievalqa_jsonl, summarize_rows
from icr2_components.evaluation.gates.retrieval_decisions import score_retrieval_decisions
from icr2_components.evaluation.metrics.answer_match import answer_match
from icr2_components.gates import TimeAwareRetrievalGate
from icr2_components.gates.demonstrations import default_pool_path, load_demonstration_pool, rank_by_similarity
from icr2_components.gates.prompts import (
    GATE_INSTRUCTION,
    Demonstration,
    interleave_demonstrations,
    render_ta_are_prompt,
    render_vanilla_prompt,
)
from icr2_components.gates.yes_no_scoring import (
    answer_key,
    answer_position,
    parse_yes_no_reply,
    score_yes_no_top_logprobs,
    two_way_probability,
)
from icr2_components.text.normalization import normalize_answer, normalize_text

pytestmark = pytest.mark.unit

BENCH_SET = Path(__file__).resolve().parents[1] / "bench" / "data" / "gate_eval.jsonl"


def test_vanilla_prompt_is_the_papers_figure_5():
    prompt = render_vanilla_prompt("Who won?")
    assert prompt.startswith("Given a question, determine whether you need to retrieve external resources")
    assert prompt.endswith('Only answer "[Yes]" or "[No]".\n\nQuestion: Who won?\n\nAnswer:')
    assert "Today is" not in prompt


def test_ta_are_prompt_holds_date_and_demonstrations_before_the_question():
    demos = [Demonstration("Who won Eurovision 2024?", True), Demonstration("What is the capital of Spain?", False)]
    prompt = render_ta_are_prompt("Who won?", dt.date(2025, 6, 1), demos)
    assert prompt.startswith(f"Today is 2025-06-01. {GATE_INSTRUCTION}")
    assert "Question: Who won Eurovision 2024?\nAnswer: [Yes]" in prompt
    assert "Question: What is the capital of Spain?\nAnswer: [No]" in prompt
    assert prompt.index("[No]\n") < prompt.rindex("Question: Who won?")
    # the paper's ablations: no date, no demonstrations
    assert "Today is" not in render_ta_are_prompt("Who won?", None, demos)
    assert "Here are some examples" not in render_ta_are_prompt("Who won?", dt.date(2025, 6, 1), [])


def test_interleave_alternates_labels_and_keeps_leftovers():
    yes = [Demonstration(f"y{i}", True) for i in range(3)]
    no = [Demonstration("n0", False)]
    assert [d.question for d in interleave_demonstrations(yes, no)] == ["y0", "n0", "y1", "y2"]


@pytest.mark.parametrize(
    "reply, expected",
    [("[Yes]", True), ("[No]", False), ("Yes, I need to search.", True), ("no.", False),
     ("No, yes", False), ("I don't know", None), ("Not sure, maybe later", None), ("", None), ("Yesterday", None)],
)
def test_parse_yes_no_reply(reply, expected):
    assert parse_yes_no_reply(reply) is expected


def test_two_way_probability_is_a_stable_softmax():
    assert two_way_probability(-1.0, -1.0) == pytest.approx(0.5)
    assert two_way_probability(-1000.0, -1001.0) == pytest.approx(1 / (1 + math.exp(-1)))
    assert two_way_probability(0.0, -50.0) > 0.999


def test_pool_with_broken_lines_counts_every_skip(tmp_path):
    path = tmp_path / "pool.jsonl"
    path.write_text("\n".join([
        json.dumps({"question": "Who won the 2024 Tour de France?", "source": "new_world"}),
        '{"question": "unterminated',
        json.dumps(["not", "an", "object"]),
        json.dumps({"answers": ["x"]}),
        json.dumps({"question": "   "}),
        json.dumps({"question": "who won the 2024 tour de france"}),
        "",
        json.dumps({"question": "Which network aired The Alcoa Hour?"}),
    ]) + "\n")
    pool, skips = load_demonstration_pool(path, needs_retrieval=True)
    assert [d.question for d in pool] == ["Who won the 2024 Tour de France?", "Which network aired The Alcoa Hour?"]
    assert all(d.needs_retrieval for d in pool)
    assert dict(skips.counts) == {
        "malformed JSON": 1, "not a JSON object": 1, "missing or empty question": 2, "duplicate question": 1,
    }
    assert skips.examples["malformed JSON"][0].startswith("line 2")


def test_default_pools_load_cleanly_and_share_no_question_with_the_bench_set():
    yes, yes_skips = load_demonstration_pool(default_pool_path(True), True)
    no, no_skips = load_demonstration_pool(default_pool_path(False), False)
    assert yes and no and yes_skips.total == 0 and no_skips.total == 0
    # the key the pools deduplicate by (demonstrations.is_same_question): the loose normalize_text
    bench = {
        normalize_text(json.loads(line)["question"]) for line in BENCH_SET.read_text().splitlines() if line.strip()
    }
    pools = {normalize_text(d.question) for d in yes + no}
    assert not bench & pools


def test_gate_training_pool_is_disjoint_from_the_bench_set_and_its_contexts_hold_an_answer():
    from icr2_components.evaluation.metrics.answer_match import answer_match

    training = [json.loads(line) for line in (BENCH_SET.parent / "gate_train_pool.jsonl").read_text().splitlines()]
    bench = {
        normalize_text(json.loads(line)["question"]) for line in BENCH_SET.read_text().splitlines() if line.strip()
    }
    assert len(training) == 46 and not bench & {normalize_text(row["question"]) for row in training}
    for row in training:
        # the answerable ones take the index's passages, as the bench set's answerable ones do
        assert ("context" in row) == (row["data_source"] != "answerable"), row["question"]
        if "context" in row:
            assert answer_match(row["context"][0], row["ground_truth"]), row["question"]


def test_confirmatory_gate_candidates_are_new_and_their_contexts_hold_an_answer():
    """The confirmatory held-apart set (bench/data/gate_confirm_preregistration.md) shares no question with the
    earlier sets, reads each long-tail question off a DPR-sample passage no earlier question used, and its kept set
    (written by make_gate_sets.py confirm) is a subset of its candidates."""
    from icr2_components.kilt.sample import DPR_FILE, shared_data_dir

    data = BENCH_SET.parent
    candidates = [json.loads(line) for line in (data / "gate_confirm_candidates.jsonl").read_text().splitlines()]
    earlier = [json.loads(line) for name in ("gate_eval_candidates.jsonl", "gate_pool_candidates.jsonl",
                                             "gate_train_pool.jsonl", "gate_eval.jsonl")
               for line in (data / name).read_text().splitlines() if line.strip()]
    questions = [normalize_text(row["question"]) for row in candidates]
    assert len(questions) == len(set(questions)) == 142
    assert not set(questions) & {normalize_text(row["question"]) for row in earlier}
    used_passages = {row["dpr_id"] for row in earlier if "dpr_id" in row}
    passages = {}
    for line in (shared_data_dir() / DPR_FILE).read_text().splitlines():
        record = json.loads(line)
        passages[str(record["id"])] = record["contents"]
    long_tail = [row for row in candidates if row["data_source"] == "long_tail"]
    assert len(long_tail) == 48 and len({row["dpr_id"] for row in long_tail}) == 48
    for row in candidates:
        assert ("context" in row) == (row["data_source"] != "answerable") == row["needs_retrieval"], row["question"]
        if "context" in row:
            assert answer_match(row["context"][0], row["ground_truth"]), row["question"]
        if row["data_source"] == "long_tail":
            assert row["dpr_id"] not in used_passages and answer_match(passages[row["dpr_id"]], row["ground_truth"])
    kept = [json.loads(line) for line in (data / "gate_confirm.jsonl").read_text().splitlines() if line.strip()]
    assert len(kept) == 129 and {normalize_text(row["question"]) for row in kept} <= set(questions)
    # kept as gate_eval was: the model's closed-book behaviour agreed with each question's label
    assert all(answer_match(row["smollm2_closed_book_answer"], row["ground_truth"]) != row["needs_retrieval"]
               for row in kept)


def test_rank_by_similarity_is_stable_and_skips_excluded_rows():
    import numpy as np

    pool = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.6, 0.8]])
    query = np.array([1.0, 0.0])
    assert rank_by_similarity(query, pool, [False] * 4) == [0, 2, 3, 1]
    assert rank_by_similarity(query, pool, [True, False, False, False]) == [2, 3, 1]


def test_answer_match_normalises_like_squad():
    # official SQuAD/KILT normalisation: "the  eiffel-tower!" -> punctuation deleted (not turned into a space)
    # -> "the  eiffeltower" -> article removed -> "eiffeltower" (the old "eiffel tower" replaced the hyphen)
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert answer_match("It is the Philadelphia Eagles.", ["Philadelphia Eagles"])
    assert not answer_match("I don't know", ["Anora"])
    assert not answer_match("anything", ["", "  "])


def test_retrieval_decision_scores_by_hand():
    decisions = [True, True, False, False, True]
    labels = [True, False, False, True, None]
    scores = score_retrieval_decisions(decisions, labels)
    assert scores.count == 5 and scores.labelled == 4
    assert scores.retrieval_rate == pytest.approx(3 / 5)
    assert scores.retrieval_accuracy == pytest.approx(2 / 4)
    # retrieve class: P = 1/2, R = 1/2; no-retrieve class: P = 1/2, R = 1/2
    assert (
        scores.precision == pytest.approx(0.5)
        and scores.recall == pytest.approx(0.5)
        and scores.f1 == pytest.approx(0.5)
    )
    only_positive = score_retrieval_decisions([True, False, True, True], [True] * 4)
    assert only_positive.retrieval_accuracy == pytest.approx(0.75) and only_positive.precision == pytest.approx(1.0)
    assert score_retrieval_decisions([True], None).retrieval_accuracy is None
    with pytest.raises(ValueError, match="one label"):
        score_retrieval_decisions([True], [True, False])


def test_summarize_rows_uses_the_branch_the_mode_takes():
    rows = [
        GateEvalRow("q1", "s", True, retrieve=True, p_yes=0.9, closed_book_match=False, context_match=True),
        GateEvalRow("q2", "s", False, retrieve=True, p_yes=0.6, closed_book_match=True, context_match=False),
    ]
    summary = summarize_rows(rows)
    assert summary["adaptive"]["match"] == pytest.approx(0.5)
    assert summary["always"]["match"] == pytest.approx(0.5)
    assert summary["never"]["match"] == pytest.approx(0.5)
    assert summary["never"]["retrieval_rate"] == 0 and summary["always"]["retrieval_rate"] == 1
    assert summary["adaptive"]["retrieval_accuracy"] == pytest.approx(0.5)


def test_read_retrievalqa_counts_empty_questions_and_missing_answers(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join([
        json.dumps({"question": "Who won?", "ground_truth": ["A"], "context": [{"title": "T", "text": "A won."}],
                    "param_knowledge_answerable": 0, "data_source": "realtimeqa"}),
        json.dumps({"question": "", "ground_truth": ["A"]}),
        json.dumps({"question": "No answers?", "ground_truth": []}),
        json.dumps({"question": "Capital of France?", "ground_truth": "Paris", "needs_retrieval": False}),
    ]))
    records, skips = read_retrievalqa_jsonl(path)
    assert [r.question for r in records] == ["Who won?", "Capital of France?"]
    assert (
        records[0].needs_retrieval is True
        and records[0].context == ("T\nA won.",)
        and records[0].source == "realtimeqa"
    )
    assert records[1].ground_truth == ("Paris",) and records[1].needs_retrieval is False
    assert skips.counts["empty question"] == 1 and skips.counts["no ground_truth answer"] == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"method": "sometimes"}, "method must be one of"),
        ({"n_yes": -1}, "n_yes"),
        ({"threshold": 1.5}, "threshold"),
        ({"today": "June 1st"}, "ISO date"),
        ({"on_unparsed": "guess"}, "on_unparsed"),
        ({"model": ""}, "needs a model"),
        ({"yes_pool": "/no/such/pool.jsonl"}, "does not exist"),
        ({"yes_answer": "No"}, "two different"),
        ({"chat_generator": object()}, "ChatGenerator"),
        ({"server": "http://127.0.0.1:8089/v1"}, "mapping"),
        ({"server": {"api_base_url": "127.0.0.1:8089", "model": "m"}}, "http"),
        ({"server": {"model": "m"}}, "api_base_url"),
        ({"server": {"api_base_url": "http://h/v1", "model": "m", "port": 1}}, "unknown key"),
        ({"server": {"api_base_url": "http://h/v1", "model": "m", "timeout_s": 0}}, "timeout_s"),
        ({"server": {"api_base_url": "http://h/v1", "model": "m"}, "top_logprobs": 21}, "top_logprobs"),
        ({"server": {"api_base_url": "http://h/v1", "model": "m"}, "chat_generator": lambda: None}, "not both"),
    ],
)
def test_init_rejects_bad_parameters_with_what_to_do(kwargs, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        TimeAwareRetrievalGate(**kwargs)


def test_always_and_never_route_without_a_model_and_reject_empty_questions():
    always = TimeAwareRetrievalGate(method="always", model=None)
    never = TimeAwareRetrievalGate(method="never", model=None)
    assert always.run(query=" Who won? ")["retrieve"] == "Who won?"
    result = never.run(query="Who won?")
    assert "retrieve" not in result and result["no_retrieval"] == "Who won?" and result["decision"]["p_yes"] == 0.0
    for bad in ("", "   "):
        with pytest.raises(ValueError, match="non-empty query"):
            always.run(query=bad)


def test_retrieval_auroc_by_hand():
    from icr2_components.evaluation.gates.retrieval_decisions import retrieval_auroc

    assert retrieval_auroc([0.9, 0.8, 0.1, 0.2], [True, True, False, False]) == 1.0
    assert retrieval_auroc([0.1, 0.8, 0.9, 0.2], [True, True, False, False]) == 0.25
    assert retrieval_auroc([0.5, 0.5], [True, False]) == 0.5
    assert retrieval_auroc([0.5, None, 0.7], [True, False, None]) is None


def test_demonstration_order_puts_the_chosen_label_first():
    yes = [Demonstration("y0", True), Demonstration("y1", True)]
    no = [Demonstration("n0", False), Demonstration("n1", False)]
    assert [d.question for d in interleave_demonstrations(yes, no, "no_first")] == ["n0", "y0", "n1", "y1"]
    with pytest.raises(ValueError, match="order"):
        interleave_demonstrations(yes, no, "random")


def test_run_time_method_override_needs_a_model_when_built_without_one():
    gate = TimeAwareRetrievalGate(method="never", model=None)
    with pytest.raises(ValueError, match="needs a model"):
        gate.run(query="Who won?", method="vanilla")


def test_init_reads_no_pool_file_the_pools_are_read_in_warm_up(tmp_path):
    """__init__ checks only that a pool path exists; an empty pool fails when warm_up reads it."""
    from haystack import component
    from haystack.dataclasses import ChatMessage

    @component
    class SaysYes:
        @component.output_types(replies=list[ChatMessage])
        def run(self, messages: list[ChatMessage]):
            return {"replies": [ChatMessage.from_assistant("[Yes]")]}

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    gate = TimeAwareRetrievalGate(method="ta_are", chat_generator=SaysYes(), yes_pool=str(empty))
    assert gate.pool_skips == {}
    with pytest.raises(ValueError, match="has no usable question; n_yes=2"):
        gate.warm_up()


def _position(token: str, top: dict[str, float]) -> dict:
    return {"token": token, "logprob": top.get(token, -1.0),
            "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top.items()]}


def test_answer_key_reads_case_space_and_bracket_variants():
    assert {answer_key(t) for t in ("Yes", " yes", "[Yes", "YES", "Yes]", " [yes]", "Yes,")} == {"yes"}
    assert {answer_key(t) for t in ("No", " no", "[No", "NO.")} == {"no"}
    assert answer_key("Yesterday") == "yesterday" and answer_key("Not") == "not" and answer_key(" [") == ""
    assert answer_key("Yes, retrieve]") == "yes"


def test_top_logprobs_scoring_skips_the_answer_prefix_and_sums_variants():
    """OpenAI-shaped logprobs (as Haystack keeps them in reply.meta["logprobs"]), written by hand."""
    prefixed = {"content": [_position("[", {"[": -0.1, "Yes": -3.0}), _position(" ", {" ": -0.2}),
                            _position("Yes", {"Yes": math.log(0.4), " yes": math.log(0.1), "No": math.log(0.3),
                                              "[No": math.log(0.1), "Yesterday": math.log(0.05)}),
                            _position("]", {"]": -0.01})]}
    assert answer_position(prefixed["content"], "[") == 2
    score = score_yes_no_top_logprobs(prefixed, "Yes", "No", "[")
    assert score.scoring == "top_logprobs"
    assert score.p_yes == pytest.approx(0.5 / 0.9) and score.answer_mass == pytest.approx(0.9)
    # without a prefix the first position is the answer position
    unprefixed = {"content": [_position("You", {"You": math.log(0.2), "No": math.log(0.06), "Yes": math.log(0.02)})]}
    assert answer_position(unprefixed["content"], "[") == 0
    assert score_yes_no_top_logprobs(unprefixed, "Yes", "No", "[").p_yes == pytest.approx(0.25)


def test_top_logprobs_scoring_gives_none_when_it_cannot_say():
    neither = {"content": [_position("Maybe", {"Maybe": -0.5, "Perhaps": -1.0})]}
    only_chosen = {"content": [{"token": "Yes", "logprob": -0.1, "top_logprobs": []}]}
    only_prefix = {"content": [_position("[", {"[": -0.1}), _position("\n", {"\n": -0.1})]}
    for logprobs in (None, {}, {"content": None}, {"content": []}, neither, only_chosen, only_prefix):
        assert score_yes_no_top_logprobs(logprobs, "Yes", "No", "[") is None, logprobs
    assert score_yes_no_top_logprobs(neither, "Yes", "Yes!", "[") is None  # answers that read the same


def test_threshold_needs_probabilities_but_a_server_gives_them():
    from haystack import component
    from haystack.dataclasses import ChatMessage

    @component
    class Generator:
        def __init__(self, generation_kwargs=None):
            self.generation_kwargs = generation_kwargs

        @component.output_types(replies=list[ChatMessage])
        def run(self, messages: list[ChatMessage]):
            return {"replies": [ChatMessage.from_assistant("[Yes]")]}

    with pytest.raises(ValueError, match="not asked for log-probabilities"):
        TimeAwareRetrievalGate(method="threshold", chat_generator=Generator())
    asked = TimeAwareRetrievalGate(method="threshold", chat_generator=Generator({"logprobs": True, "top_logprobs": 5}))
    served = TimeAwareRetrievalGate(
        method="threshold", model=None, server={"api_base_url": "http://h/v1", "model": "m"}
    )
    assert asked.gives_probabilities and served.gives_probabilities
    # a reply without log-probabilities is parsed, counted, and thresholded as 1.0
    decision = asked.run(query="Who won?")["decision"]
    assert decision["scoring"] == "reply" and decision["p_yes"] == 1.0 and asked.stats["reply_fallbacks"] == 1
