"""The gate on the real SmolLM2-135M-Instruct (and MiniLM for demonstration choice): prompts, probabilities,
the parsed-reply path through a real ChatGenerator (LocalChatReader), and routing in the YAML pipeline."""

import inspect
from pathlib import Path

import pytest
import torch
from haystack import Pipeline
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ChatMessage

from icr2_components.gates import TimeAwareRetrievalGate
from icr2_components.gates.demonstrations import default_pool_path, load_demonstration_pool
from icr2_components.gates.yes_no_scoring import parse_yes_no_reply
from icr2_components.pipeline_loading import load_pipeline, loads_pipeline
from icr2_components.readers import LocalChatReader

ROOT = Path(__file__).resolve().parents[1]
CPU = {"dtype": "float32", "device": "cpu"}
GATE_CPU = {"model_settings": CPU}
NEW_WORLD_QUESTION = "Who became Chancellor of Germany in May 2025?"


def direct_p_yes(model, tokenizer, prompt: str, yes: str = "Yes", no: str = "No") -> float:
    """P(yes) computed here from the model's logits, independently of the gate's code."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer(text + "[", add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1]
    pair = logits[[tokenizer.convert_tokens_to_ids(yes), tokenizer.convert_tokens_to_ids(no)]]
    return float(torch.softmax(pair, dim=0)[0])


@pytest.fixture(scope="module")
def ta_are_gate(smollm2, minilm):
    gate = TimeAwareRetrievalGate(method="ta_are", today="2025-06-01", **GATE_CPU)
    gate.warm_up()
    return gate


def test_probability_agrees_with_the_models_logits(ta_are_gate, smollm2):
    model, tokenizer = smollm2
    decision = ta_are_gate.run(query=NEW_WORLD_QUESTION)["decision"]
    assert decision["scoring"] == "next_token"
    assert decision["p_yes"] == pytest.approx(direct_p_yes(model, tokenizer, decision["prompt"]), abs=1e-5)
    assert decision["retrieve"] == (decision["p_yes"] >= 0.5)
    assert 0.0 < decision["answer_mass"] <= 1.0


def test_reused_prompt_prefix_gives_the_full_pass_probability(ta_are_gate, smollm2):
    """The second question onwards runs only what follows the shared start (system turn, date, instruction);
    P(yes) still agrees with an independent full forward pass."""
    model, tokenizer = smollm2
    questions = ["Who won the 2025 Nobel Prize in Chemistry?", "What is the capital of France?", NEW_WORLD_QUESTION]
    decisions = [ta_are_gate.run(query=q)["decision"] for q in questions]
    assert all(d["reused_prefix_tokens"] >= 60 for d in decisions[1:])  # ~90 of ~195 tokens here
    for decision in decisions:
        assert decision["p_yes"] == pytest.approx(direct_p_yes(model, tokenizer, decision["prompt"]), abs=1e-4)
    whole = TimeAwareRetrievalGate(
        method="ta_are", today="2025-06-01", model_settings={**CPU, "reuse_prompt_prefix": False}
    )
    again = whole.run(query=questions[1])["decision"]
    assert again["reused_prefix_tokens"] == 0
    assert again["p_yes"] == pytest.approx(decisions[1]["p_yes"], abs=1e-4)


def test_prefix_cache_logits_match_full_passes_and_refuse_empty_prompts(smollm2):
    from icr2_components.models.prefix_cache import PrefixKVCache

    model, tokenizer = smollm2
    cache = PrefixKVCache(min_reuse_tokens=4)
    texts = [
        "The capital of France is Paris. The capital of Italy is",
        "The capital of France is Paris. The capital of Spain is",
        "The capital of France is Paris.",
        "A different start entirely, so nothing is shared here",
    ]
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        logits, reused = cache.next_token_logits(model, ids)
        with torch.no_grad():
            full = model(input_ids=torch.tensor([ids])).logits[0, -1]
        assert torch.allclose(logits, full, atol=1e-4), text
        assert reused < len(ids)
    assert cache.stats["reused_calls"] == 2  # Spain after Italy, then the shorter prefix of both
    with pytest.raises(ValueError, match="empty prompt"):
        cache.next_token_logits(model, [])
    with pytest.raises(ValueError, match="min_reuse_tokens"):
        PrefixKVCache(min_reuse_tokens=0)


def test_vanilla_and_threshold_probabilities_agree_with_logits(smollm2):
    model, tokenizer = smollm2
    vanilla = TimeAwareRetrievalGate(method="vanilla", **GATE_CPU).run(query=NEW_WORLD_QUESTION)["decision"]
    assert "Today is" not in vanilla["prompt"] and vanilla["demonstrations"] == []
    p = direct_p_yes(model, tokenizer, vanilla["prompt"])
    assert vanilla["p_yes"] == pytest.approx(p, abs=1e-5)
    # the calibration baseline routes by the same probability against t
    below = TimeAwareRetrievalGate(method="threshold", threshold=max(p - 0.01, 0.0), **GATE_CPU).run(
        query=NEW_WORLD_QUESTION
    )
    above = TimeAwareRetrievalGate(method="threshold", threshold=min(p + 0.01, 1.0), **GATE_CPU).run(
        query=NEW_WORLD_QUESTION
    )
    assert "retrieve" in below and "no_retrieval" in above
    assert below["decision"]["p_yes"] == pytest.approx(p, abs=1e-5)


def test_date_and_chosen_demonstrations_appear_in_the_prompt(ta_are_gate):
    decision = ta_are_gate.run(query=NEW_WORLD_QUESTION, today="2031-02-03")["decision"]
    prompt = decision["prompt"]
    assert decision["today"] == "2031-02-03" and prompt.startswith("Today is 2031-02-03.")
    labels = [d["label"] for d in decision["demonstrations"]]
    assert labels == ["[Yes]", "[No]", "[Yes]", "[No]"]
    for demonstration in decision["demonstrations"]:
        assert f"Question: {demonstration['question']}\nAnswer: {demonstration['label']}" in prompt
    assert prompt.rstrip().endswith(f"Question: {NEW_WORLD_QUESTION}\n\nAnswer:")
    # the date also reaches the text the model scores
    assert "Today is 2031-02-03." in decision["rendered_prompt"] and decision["rendered_prompt"].endswith("[")


def test_demonstrations_are_chosen_by_similarity_deterministically(ta_are_gate, minilm):
    first = ta_are_gate.run(query=NEW_WORLD_QUESTION)["decision"]["demonstrations"]
    fresh = TimeAwareRetrievalGate(method="ta_are", today="2025-06-01", **GATE_CPU)
    again = fresh.run(query=NEW_WORLD_QUESTION)["decision"]["demonstrations"]
    assert first == again
    # the [Yes] pick is the pool question nearest to the query by MiniLM cosine similarity
    yes_pool, _ = load_demonstration_pool(default_pool_path(True), True)
    vectors = minilm.encode([NEW_WORLD_QUESTION] + [d.question for d in yes_pool], normalize_embeddings=True)
    best = yes_pool[int((vectors[1:] @ vectors[0]).argmax())].question
    assert first[0]["question"] == best
    other = ta_are_gate.run(query="What is the capital of Germany?")["decision"]["demonstrations"]
    assert other != first


def test_demonstrations_never_include_the_judged_question(ta_are_gate):
    yes_pool, _ = load_demonstration_pool(default_pool_path(True), True)
    judged = yes_pool[0].question
    decision = ta_are_gate.run(query=judged.upper())["decision"]
    assert decision["excluded_demonstrations"] == 1
    assert all(d["question"] != judged for d in decision["demonstrations"])
    assert len([d for d in decision["demonstrations"] if d["label"] == "[Yes]"]) == 2


def test_multi_token_answers_fall_back_to_sequence_logprobs_on_smollm2(smollm2):
    model, tokenizer = smollm2
    gate = TimeAwareRetrievalGate(method="vanilla", yes_answer="Yes, retrieve]", no_answer="No, answer]", **GATE_CPU)
    decision = gate.run(query=NEW_WORLD_QUESTION)["decision"]
    assert decision["scoring"] == "sequence_logprob"
    text = decision["rendered_prompt"]
    prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    totals = []
    for answer in ("Yes, retrieve]", "No, answer]"):
        ids = tokenizer(text + answer, add_special_tokens=False)["input_ids"]
        assert ids[: len(prompt_ids)] == prompt_ids and len(ids) - len(prompt_ids) > 1
        with torch.no_grad():
            logprobs = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0], dim=-1)
        totals.append(sum(float(logprobs[i - 1, ids[i]]) for i in range(len(prompt_ids), len(ids))))
    expected = float(torch.softmax(torch.tensor(totals), dim=0)[0])
    assert decision["p_yes"] == pytest.approx(expected, abs=1e-4)


def test_chat_generator_path_parses_a_real_smollm2_reply(smollm2):
    reader = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=6, **CPU)
    gate = TimeAwareRetrievalGate(method="vanilla", chat_generator=reader)
    result = gate.run(query=NEW_WORLD_QUESTION)
    decision = result["decision"]
    expected = reader.run(messages=[ChatMessage.from_user(decision["prompt"])])["replies"][0].text
    assert decision["scoring"] == "reply" and decision["reply"] == expected
    # SmolLM2 (greedy) answers the vanilla prompt for this 2025 question with a plain "No": parsed, not retrieved
    assert parse_yes_no_reply(expected) is False, expected
    assert decision["parsed"] is True and decision["retrieve"] is False and decision["p_yes"] == 0.0
    assert "no_retrieval" in result and "retrieve" not in result
    assert gate.stats["decisions"] == 1 and gate.stats["unparsed_replies"] == 0 and gate.stats["retrieve"] == 0
    # the nested generator round-trips through YAML under the project's deserialization allowlist
    pipeline = Pipeline()
    pipeline.add_component("gate", gate)
    restored = loads_pipeline(pipeline.dumps()).get_component("gate")
    assert isinstance(restored.chat_generator, LocalChatReader) and restored.chat_generator.max_new_tokens == 6
    assert restored.to_dict() == gate.to_dict()


def test_a_real_reply_saying_neither_yes_nor_no_follows_on_unparsed_and_is_counted(smollm2):
    """The other parse outcome, on a real SmolLM2 reply: sampling at a very high temperature (seeded, so the reply
    is the same each time) gives text with no yes/no word; each on_unparsed policy routes it as documented."""
    reader = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=4, do_sample=True, temperature=50.0, **CPU)
    routes = {}
    for policy in ("retrieve", "no_retrieval"):
        gate = TimeAwareRetrievalGate(method="vanilla", chat_generator=reader, on_unparsed=policy)
        torch.manual_seed(0)
        result = gate.run(query=NEW_WORLD_QUESTION)
        decision = result["decision"]
        assert parse_yes_no_reply(decision["reply"]) is None, decision["reply"]  # the reply says neither
        assert decision["scoring"] == "reply" and decision["parsed"] is False and decision["p_yes"] is None
        assert decision["retrieve"] is (policy == "retrieve") and policy in result
        assert gate.stats["decisions"] == 1 and gate.stats["unparsed_replies"] == 1
        routes[policy] = decision["reply"]
    assert routes["retrieve"] == routes["no_retrieval"]  # the same reply, routed two ways
    strict = TimeAwareRetrievalGate(method="vanilla", chat_generator=reader, on_unparsed="error")
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="neither yes nor no"):
        strict.run(query=NEW_WORLD_QUESTION)
    assert strict.stats["unparsed_replies"] == 1


@pytest.mark.unit
def test_round_trip_through_to_dict_and_from_dict():
    gate = TimeAwareRetrievalGate(method="threshold", threshold=0.3, today="2025-06-01", n_yes=3, n_no=1, **GATE_CPU)
    data = component_to_dict(gate, "gate")
    assert data == gate.to_dict()
    assert data["init_parameters"]["threshold"] == 0.3 and data["init_parameters"]["chat_generator"] is None
    # the named parameters in the signature's order, then the method's own (`**method_parameters`), flat as in YAML
    named = [name for name, p in inspect.signature(TimeAwareRetrievalGate.__init__).parameters.items()
             if name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
    assert list(data["init_parameters"]) == [*named, "threshold", "n_yes", "n_no"]
    again = component_from_dict(TimeAwareRetrievalGate, data, "gate")
    assert component_to_dict(again, "gate") == data
    assert (again.method, again.today) == ("threshold", "2025-06-01")
    assert again.method_parameters == {"threshold": 0.3, "n_yes": 3, "n_no": 1}


@pytest.mark.slow
def test_adaptive_rag_yaml_routes_each_query_to_exactly_one_branch(smollm2, minilm):
    pipeline = load_pipeline(ROOT / "pipelines" / "adaptive_rag.yaml")
    included = {"gate", "retriever", "closed_book_reader", "rag_reader", "answer"}
    result = pipeline.run({"gate": {"query": NEW_WORLD_QUESTION, "today": "2025-06-01"}}, include_outputs_from=included)
    decision = result["gate"]["decision"]
    answer = result["answer"]["value"]
    assert len(answer) == 1 and answer[0].text
    if decision["retrieve"]:
        assert result["rag_reader"]["replies"][0].text == answer[0].text and "closed_book_reader" not in result
        assert result["retriever"]["documents"]
    else:
        assert result["closed_book_reader"]["replies"][0].text == answer[0].text and "rag_reader" not in result
        assert "retriever" not in result
    # the other branch, forced with the run-time method override
    forced = "never" if decision["retrieve"] else "always"
    other = pipeline.run({"gate": {"query": NEW_WORLD_QUESTION, "method": forced}}, include_outputs_from=included)
    ran = "rag_reader" if forced == "always" else "closed_book_reader"
    skipped = "closed_book_reader" if forced == "always" else "rag_reader"
    assert ran in other and skipped not in other
    assert other["answer"]["value"][0].text == other[ran]["replies"][0].text


def test_generating_gate_parses_the_same_decision_the_logits_give(ta_are_gate):
    generating = TimeAwareRetrievalGate(
        method="ta_are", today="2025-06-01", max_new_tokens=6, model_settings={**CPU, "local_scoring": "generate"}
    )
    for question in (NEW_WORLD_QUESTION, "What is the capital of Italy?"):
        by_reply = generating.run(query=question)["decision"]
        by_logits = ta_are_gate.run(query=question)["decision"]
        assert by_reply["prompt"] == by_logits["prompt"] and by_reply["rendered_prompt"] == by_logits["rendered_prompt"]
        assert by_reply["scoring"] == "reply" and by_reply["parsed"] is True
        assert by_reply["reply"] in ("Yes]", "No]")
        assert by_reply["retrieve"] == by_logits["retrieve"]
    with pytest.raises(ValueError, match="threshold"):
        TimeAwareRetrievalGate(method="threshold", model_settings={"local_scoring": "generate"})
