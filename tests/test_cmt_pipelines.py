"""Multi-agent and prompting CMTs: components on their own, their YAML pipelines answering a real NQ question
with SmolLM2 under CUB's controlled contexts, and the dev-split search (icr2_components.evaluation.tuning)."""

from pathlib import Path

import pytest
import yaml
from haystack import Document
from haystack.dataclasses import ChatMessage

from icr2_components.cmt.context_use_prompt_builder import CONTEXT_USE_INSTRUCTIONS, ContextUsePromptBuilder
from icr2_components.cmt.multi_agent_answer_prompt_builder import MultiAgentAnswerPromptBuilder, parse_verdict
from icr2_components.cmt.relevance_judge_prompt_builder import RelevanceJudgePromptBuilder
from icr2_components.evaluation.pipeline_spec import PipelineSpec

ROOT = Path(__file__).resolve().parents[1]
DOCS = [Document(content="Hamlet is a tragedy written by William Shakespeare.", meta={"title": "Hamlet"})]


@pytest.fixture(scope="module")
def nq(sample_files):
    from icr2_components.evaluation.compare_data import answer_pool, read_compare_questions
    from icr2_components.evaluation.context_types import build_context_set

    questions, _, path = read_compare_questions(sample_files.tasks, limit=1)
    question = questions[0]
    return question, build_context_set(question.id, question.answers, question.gold_documents,
                                       question.irrelevant_candidates, answer_pool(path))


def test_verdicts_are_parsed_and_unclear_is_reported():
    assert parse_verdict("Yes, it does.") == "relevant"
    assert parse_verdict(" no") == "irrelevant"
    assert parse_verdict("The context says") == "unclear"
    builder = MultiAgentAnswerPromptBuilder(on_unclear="irrelevant")
    out = builder.run(query="who wrote hamlet", documents=DOCS, judge_replies=[ChatMessage.from_assistant("Maybe")])
    assert out["verdict"] == "unclear" and "Shakespeare" not in out["prompt"][-1].text  # answered from memory
    out = builder.run(query="who wrote hamlet", documents=DOCS, judge_replies=[ChatMessage.from_assistant("yes")])
    assert out["verdict"] == "relevant" and "Shakespeare" in out["prompt"][-1].text


def test_components_refuse_bad_input_and_round_trip():
    with pytest.raises(ValueError, match="no documents"):
        RelevanceJudgePromptBuilder().run(query="q", documents=[])
    with pytest.raises(ValueError, match="on_unclear"):
        MultiAgentAnswerPromptBuilder(on_unclear="ask")
    with pytest.raises(ValueError, match="choose one of"):
        ContextUsePromptBuilder(instruction="be nice")
    for component in (RelevanceJudgePromptBuilder(), MultiAgentAnswerPromptBuilder(), ContextUsePromptBuilder("trust_context")):
        assert type(component).from_dict(component.to_dict()).to_dict() == component.to_dict()


def test_named_instructions_lead_the_prompt():
    for name, text in CONTEXT_USE_INSTRUCTIONS.items():
        content = ContextUsePromptBuilder(instruction=name).run(query="who wrote hamlet", documents=DOCS)["prompt"][-1].text
        assert content.startswith(text or "Please answer the following question")
        assert "Hamlet is a tragedy" in content


@pytest.mark.parametrize("context_type", ["gold", "irrelevant"])
def test_multi_agent_pipeline_makes_two_generator_calls_and_answers(nq, context_type):
    question, contexts = nq
    spec = PipelineSpec.from_file(str(ROOT / "pipelines" / "cmt_multi_agent.yaml"))
    assert spec.context_input == "judge_prompt.documents"
    pipeline = spec.pipeline(controlled=True)
    result = pipeline.run({"judge_prompt": {"query": question.query, "documents": contexts.documents(context_type)},
                           "answer_prompt": {"query": question.query}, "reader": {"max_new_tokens": 4}},
                          include_outputs_from={"judge", "answer_prompt"})
    assert result["judge"]["replies"][0].text  # first generator call
    assert result["answer_prompt"]["verdict"] in {"relevant", "irrelevant", "unclear"}
    assert result["reader"]["replies"][0].text.strip()  # second generator call


def test_prompting_pipeline_loads_and_answers(nq):
    question, contexts = nq
    spec = PipelineSpec.from_file(str(ROOT / "pipelines" / "cmt_prompting.yaml"))
    result = spec.run(question.query, contexts.documents("gold"), controlled=True, max_new_tokens=4)
    assert result["answer"].strip()


def test_dev_split_search_picks_the_best_mean_bcu_and_writes_a_tuned_yaml(tmp_path, sample_files):
    from icr2_components.evaluation.tuning import tune_pipeline

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
    with pytest.raises(ValueError, match="component.init_parameter"):
        tune_pipeline(str(path), dataset=sample_files.tasks, dev_limit=1, out_dir=tmp_path / "tune")
