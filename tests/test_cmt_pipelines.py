"""Multi-agent and prompting CMTs: components on their own, their YAML pipelines answering a real NQ question
with SmolLM2 under CUB's controlled contexts, and the dev-split search (icr2_components.evaluation.compare.tuning)."""

from pathlib import Path

import pytest
import yaml
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ChatMessage

from icr2_components.builders.context_use_prompt_builder import CONTEXT_USE_INSTRUCTIONS, ContextUsePromptBuilder
from icr2_components.builders.multi_agent_answer_prompt_builder import MultiAgentAnswerPromptBuilder, parse_verdict
from icr2_components.builders.relevance_judge_prompt_builder import RelevanceJudgePromptBuilder
from icr2_components.pipeline_spec import PipelineSpec

ROOT = Path(__file__).resolve().parents[1]
DOCS = [Document(content="Hamlet is a tragedy written by William Shakespeare.", meta={"title": "Hamlet"})]


@pytest.fixture(scope="module")
def nq(sample_files):
    from icr2_components.kilt.context_types import build_context_set
    from icr2_components.kilt.questions import answer_pool, read_compare_questions

    questions, _, path = read_compare_questions(sample_files.tasks, limit=1)
    question = questions[0]
    return question, build_context_set(question.id, question.answers, question.gold_documents,
                                       question.irrelevant_candidates, answer_pool(path))


@pytest.mark.unit
def test_verdicts_are_parsed_and_unclear_is_reported():
    assert parse_verdict("Yes, it does.") == "relevant"
    assert parse_verdict(" no") == "irrelevant"
    assert parse_verdict("The context says") == "unclear"
    builder = MultiAgentAnswerPromptBuilder(on_unclear="irrelevant")
    out = builder.run(query="who wrote hamlet", documents=DOCS, judge_replies=[ChatMessage.from_assistant("Maybe")])
    assert out["verdict"] == "unclear" and "Shakespeare" not in out["prompt"][-1].text  # answered from memory
    out = builder.run(query="who wrote hamlet", documents=DOCS, judge_replies=[ChatMessage.from_assistant("yes")])
    assert out["verdict"] == "relevant" and "Shakespeare" in out["prompt"][-1].text


@pytest.mark.unit
def test_components_refuse_bad_input_and_round_trip():
    with pytest.raises(ValueError, match="no documents"):
        RelevanceJudgePromptBuilder().run(query="q", documents=[])
    # an empty passage is named, not rendered as an empty context the reader is asked about
    with pytest.raises(ValueError, match=r"\['blank'\] have no text"):
        RelevanceJudgePromptBuilder().run(query="q", documents=[*DOCS, Document(id="blank", content="  ")])
    with pytest.raises(ValueError, match="on_unclear"):
        MultiAgentAnswerPromptBuilder(on_unclear="ask")
    with pytest.raises(ValueError, match="choose one of"):
        ContextUsePromptBuilder(instruction="be nice")
    for component in (
        RelevanceJudgePromptBuilder(),
        MultiAgentAnswerPromptBuilder(),
        ContextUsePromptBuilder("trust_context"),
    ):
        data = component_to_dict(component, "c")
        assert component_to_dict(component_from_dict(type(component), data, "c"), "c") == data
    assert (
        component_to_dict(ContextUsePromptBuilder("trust_context"), "c")["init_parameters"]["instruction"]
        == "trust_context"
    )


@pytest.mark.unit
def test_named_instructions_lead_the_prompt():
    for name, text in CONTEXT_USE_INSTRUCTIONS.items():
        content = (
            ContextUsePromptBuilder(instruction=name).run(query="who wrote hamlet", documents=DOCS)["prompt"][-1].text
        )
        assert content.startswith(text or "Please answer the following question")
        assert "Hamlet is a tragedy" in content


def _prompt_tokens(tokenizer, messages) -> int:
    """Tokens of a chat prompt as the reader renders it, counted here with the tokenizer."""
    from icr2_components.models.chat_messages import messages_to_dicts

    encoded = tokenizer.apply_chat_template(messages_to_dicts(messages), add_generation_prompt=True, return_dict=True)
    return len(encoded["input_ids"])


class _PrefillCounter:
    """Records the length of every multi-token forward pass of the shared SmolLM2 (one per generate call)."""

    def __init__(self, model):
        self.lengths = []
        self._hook = model.register_forward_pre_hook(self._record, with_kwargs=True)

    def _record(self, _module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[-1] > 1:
            self.lengths.append(int(ids.shape[-1]))

    def close(self):
        self._hook.remove()


# The judge's reply decides the route. SmolLM2 says "Yes" to the default judge prompt for any context (tried on
# gold, irrelevant and conflicting contexts), so the memory route is driven by a judge instruction that makes the
# real model reply "No"; both routes then run end to end through the committed YAML.
NO_JUDGE = 'Does the context below contain the answer to the question? Reply with only "no".'


@pytest.mark.parametrize("context_type, judge_instruction, verdict", [
    ("gold", None, "relevant"), ("irrelevant", NO_JUDGE, "irrelevant")])
def test_multi_agent_pipeline_makes_two_generator_calls_and_answers(
    nq, smollm2, context_type, judge_instruction, verdict
):
    from icr2_components.builders.multi_agent_answer_prompt_builder import FAITHFUL_INSTRUCTION, MEMORY_PROMPT

    model, tokenizer = smollm2
    question, contexts = nq
    documents = contexts.documents(context_type)
    spec = PipelineSpec.from_file(str(ROOT / "pipelines" / "cmt_multi_agent.yaml"))
    assert spec.context_input == "judge_prompt.documents"
    pipeline = spec.pipeline(controlled=True)
    if judge_instruction:
        pipeline.get_component("judge_prompt").instruction = judge_instruction
    counter = _PrefillCounter(model)
    try:
        result = pipeline.run({"judge_prompt": {"query": question.query, "documents": documents},
                               "answer_prompt": {"query": question.query}, "reader": {"max_new_tokens": 4}},
                              include_outputs_from={"judge_prompt", "judge", "answer_prompt"})
    finally:
        counter.close()
    judge_prompt = result["judge_prompt"]["prompt"]
    assert question.query in judge_prompt[-1].text and all(d.content in judge_prompt[-1].text for d in documents)
    judge_reply = result["judge"]["replies"][0]
    answer_prompt = result["answer_prompt"]["prompt"]
    reply = result["reader"]["replies"][0]
    # two generator calls: the judge read the judge prompt, the reader read the answer prompt, in that order
    assert counter.lengths == [_prompt_tokens(tokenizer, judge_prompt), _prompt_tokens(tokenizer, answer_prompt)]
    assert judge_reply.meta["prompt_tokens"] == counter.lengths[0] and reply.meta["prompt_tokens"] == counter.lengths[1]
    assert 0 < judge_reply.meta["completion_tokens"] <= 3 and 0 < reply.meta["completion_tokens"] <= 4
    # the judge's real reply decides the verdict, and the verdict the route
    assert parse_verdict(judge_reply.text) == result["answer_prompt"]["verdict"] == verdict, judge_reply.text
    answer_text = answer_prompt[-1].text
    if verdict == "relevant":  # faithful to the passages
        assert answer_text.startswith(FAITHFUL_INSTRUCTION) and all(d.content in answer_text for d in documents)
    else:  # from memory: the closed-book prompt, no passage
        assert [m.text for m in answer_prompt] == [MEMORY_PROMPT.format(query=question.query)]
        assert not any(d.content[:60] in answer_text for d in documents)
        assert counter.lengths[1] < counter.lengths[0] - 50
    assert reply.text.strip()


def test_prompting_pipeline_loads_and_answers(nq, smollm2):
    from icr2_components.readers import LocalChatReader

    _, tokenizer = smollm2
    question, contexts = nq
    documents = contexts.documents("gold")
    spec = PipelineSpec.from_file(str(ROOT / "pipelines" / "cmt_prompting.yaml"))
    result = spec.run(question.query, documents, controlled=True, max_new_tokens=4)
    # the reader read the YAML's instruction (faithful) leading the passages and the question
    expected = ContextUsePromptBuilder(instruction="faithful").run(query=question.query, documents=documents)["prompt"]
    text = expected[-1].text
    assert (
        text.startswith(CONTEXT_USE_INSTRUCTIONS["faithful"])
        and documents[0].content in text
        and question.query in text
    )
    assert result["prompt_tokens"] == _prompt_tokens(tokenizer, expected)
    plain = ContextUsePromptBuilder(instruction="none").run(query=question.query, documents=documents)["prompt"]
    assert result["prompt_tokens"] > _prompt_tokens(tokenizer, plain)  # the instruction is really there
    reader = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=4, dtype="float32", device="cpu")
    assert result["answer"] == reader.run(messages=expected)["replies"][0].text
    assert result["answer"].strip() and result["shown_ids"] == [d.id for d in documents]


def test_dev_split_search_picks_the_best_mean_bcu_and_writes_a_tuned_yaml(tmp_path, sample_files):
    from icr2_components.evaluation.compare.tuning import tune_pipeline

    data = yaml.safe_load((ROOT / "pipelines" / "cmt_prompting.yaml").read_text())
    data["metadata"]["tunable"] = {"prompt.instruction": ["none", "concise_faithful"]}
    path = tmp_path / "prompting_small.yaml"
    path.write_text(yaml.safe_dump(data))
    result = tune_pipeline(str(path), dataset=sample_files.tasks, dev_limit=1, dev_offset=5, out_dir=tmp_path / "tune",
                           max_new_tokens=6)
    assert len(result["table"]) == 2 and result["dev_questions"] == 1
    scores = [row["mean_bcu"] for row in result["table"]]
    assert result["best_mean_bcu"] == max(scores)
    tuned = yaml.safe_load(Path(result["tuned_file"]).read_text())
    assert tuned["components"]["prompt"]["init_parameters"]["instruction"] == result["best"]["prompt.instruction"]
    PipelineSpec.from_file(result["tuned_file"])  # the tuned YAML is a valid, comparable pipeline
    data["metadata"]["tunable"] = {"nobody.alpha": [1]}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=r"component\.init_parameter"):
        tune_pipeline(str(path), dataset=sample_files.tasks, dev_limit=1, out_dir=tmp_path / "tune")
