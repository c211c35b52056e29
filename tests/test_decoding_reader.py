"""ContextAwareDecodingReader on the real SmolLM2-135M-Instruct and a real NQ question of the bundled sample.

Weight 0 must reproduce the plain reader (LocalChatReader) exactly; weight > 0 must change the answer where the
context matters (the conflicting context of "what does hp mean in war and order", whose answer was replaced).
"""

from pathlib import Path

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ChatMessage

from icr2_components.pipeline_spec import PipelineSpec
from icr2_components.readers import ContextAwareDecodingReader, LocalChatReader, MissingContextError
from icr2_components.text.templates import render_cic_prompt

ROOT = Path(__file__).resolve().parents[1]
TOKENS = 4
QUESTION_ID = "nq-sample-00003"


@pytest.fixture(scope="module")
def nq_conflict(sample_files, smollm2):
    """(query, conflicting documents) for one real NQ question; the substitute answer replaces the gold one."""
    from icr2_components.kilt.context_types import build_context_set
    from icr2_components.kilt.questions import answer_pool, read_compare_questions

    questions, _, path = read_compare_questions(sample_files.tasks, limit=4)
    question = next(q for q in questions if q.id == QUESTION_ID)
    contexts = build_context_set(question.id, question.answers, question.gold_documents,
                                 question.irrelevant_candidates, answer_pool(path))
    documents = contexts.documents("conflicting")
    assert documents, contexts.reasons
    return question.query, documents


def _prompts(query, documents):
    context = render_cic_prompt("qa", query, documents).messages
    memory = [ChatMessage.from_user(f"Please answer the following question:\n\nQuestion: {query}\nAnswer:")]
    return context, memory


def _reader(technique, alpha, **kwargs):
    return ContextAwareDecodingReader(model="smollm2-135m-instruct", technique=technique, alpha=alpha,
                                      max_new_tokens=TOKENS, dtype="float32", device="cpu", **kwargs)


@pytest.fixture(scope="module")
def plain_answer(nq_conflict):
    context, _ = _prompts(*nq_conflict)
    reader = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=TOKENS, dtype="float32", device="cpu")
    return reader.run(messages=context)["replies"][0].text


@pytest.mark.parametrize("technique", ["cad", "acd", "coiecd"])
def test_weight_zero_is_the_plain_reader_and_weight_one_differs(technique, nq_conflict, plain_answer):
    context, memory = _prompts(*nq_conflict)
    reader = _reader(technique, 0.0)
    zero = reader.run(messages=context, memory_messages=memory)["replies"][0]
    assert zero.text == plain_answer
    assert zero.meta["completion_tokens"] == TOKENS and zero.meta["technique"] == technique
    one = reader.run(messages=context, memory_messages=memory, alpha=1.0)["replies"][0]  # run-time override
    assert one.text != plain_answer, f"{technique} at weight 1 gave the plain answer {plain_answer!r}"


def test_batched_passes_give_the_same_tokens_as_separate_caches(nq_conflict):
    context, memory = _prompts(*nq_conflict)
    separate = _reader("cad", 1.0).run(messages=context, memory_messages=memory)["replies"][0].text
    batched = _reader("cad", 1.0, passes="batched").run(messages=context, memory_messages=memory)["replies"][0].text
    assert batched == separate


def test_a_technique_without_context_is_a_clear_error(nq_conflict):
    context, memory = _prompts(*nq_conflict)
    reader = _reader("acd", 1.0)
    with pytest.raises(MissingContextError, match="no memory_messages"):
        reader.run(messages=context)
    with pytest.raises(MissingContextError, match="without a context"):
        reader.run(messages=memory, memory_messages=memory)


@pytest.mark.unit
def test_bad_settings_are_refused_at_init_and_at_run():
    with pytest.raises(ValueError, match="choose one of"):
        ContextAwareDecodingReader(technique="dola")
    with pytest.raises(ValueError, match=">= 0"):
        ContextAwareDecodingReader(alpha=-0.5)
    with pytest.raises(ValueError, match="passes"):
        ContextAwareDecodingReader(passes="parallel")
    reader = ContextAwareDecodingReader(technique="cad")
    with pytest.raises(ValueError, match="choose one of"):
        reader.run(messages=[ChatMessage.from_user("q")], technique="typical")


@pytest.mark.unit
def test_round_trip():
    reader = ContextAwareDecodingReader(technique="coiecd", alpha=0.7, coiecd_alpha=0.5, coiecd_bound_ratio=8.0,
                                        passes="batched", max_new_tokens=5)
    data = component_to_dict(reader, "reader")
    again = component_from_dict(ContextAwareDecodingReader, data, "reader")
    assert component_to_dict(again, "reader") == data
    assert (again.technique, again.alpha, again.passes) == ("coiecd", 0.7, "batched")
    assert again.rule_parameters == {"coiecd_alpha": 0.5, "coiecd_bound_ratio": 8.0}
    assert data["init_parameters"]["coiecd_alpha"] == 0.5 and data["init_parameters"]["coiecd_bound_ratio"] == 8.0


@pytest.mark.unit
def test_coiecd_settings_are_checked_and_the_old_threshold_is_refused_with_a_way_out():
    with pytest.raises(ValueError, match="lambda"):
        ContextAwareDecodingReader(technique="coiecd", coiecd_bound_ratio=0.5)
    with pytest.raises(ValueError, match=">= 0"):
        ContextAwareDecodingReader(technique="coiecd", coiecd_alpha=-1.0)
    data = component_to_dict(ContextAwareDecodingReader(technique="coiecd"), "reader")
    data["init_parameters"]["threshold"] = 0.5
    with pytest.raises(ValueError, match=r"unknown parameters \['threshold'\].*coiecd_bound_ratio"):
        component_from_dict(ContextAwareDecodingReader, data, "reader")
    reader = ContextAwareDecodingReader(technique="coiecd")
    with pytest.raises(ValueError, match="lambda"):  # a run-time override is checked as the init value is
        reader.run(messages=[ChatMessage.from_user("q")], coiecd_bound_ratio=0.5)


def _reference_decode(model, tokenizer, context_messages, memory_messages, combine, tokens):
    """Greedy decoding written out here: full forward passes (no cache) with and without the context at every
    step, the two next-token logits combined by ``combine``; returns the decoded text."""
    import torch

    from icr2_components.models.chat_messages import messages_to_dicts

    def ids(messages):
        return tokenizer.apply_chat_template(messages_to_dicts(messages), add_generation_prompt=True,
                                             return_tensors="pt", return_dict=True)["input_ids"]

    context, memory, out = ids(context_messages), ids(memory_messages), []
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, (list, tuple)) else [eos])
    with torch.inference_mode():
        for _ in range(tokens):
            z_c = model(input_ids=context, use_cache=False).logits[0, -1].float()
            z_m = model(input_ids=memory, use_cache=False).logits[0, -1].float()
            token = int(combine(z_c, z_m).argmax())
            out.append(token)
            if token in eos:
                break
            context = torch.cat([context, torch.tensor([[token]])], dim=1)
            memory = torch.cat([memory, torch.tensor([[token]])], dim=1)
    return tokenizer.decode(out, skip_special_tokens=True).strip()


def _cad(alpha):
    return lambda z_c, z_m: (1 + alpha) * z_c - alpha * z_m  # Shi et al. 2023


def _acd(z_c, z_m):  # Kim et al. 2024 at weight 1: z_m + w (z_c - z_m), w = H(p_m) / (H(p_m) + H(p_c))
    import torch

    def entropy(z):
        p = torch.softmax(z, dim=-1)
        return -(p * torch.log_softmax(z, dim=-1)).sum()

    w = entropy(z_m) / (entropy(z_m) + entropy(z_c))
    return z_m + w * (z_c - z_m)


def _coiecd(z_c, z_m):
    # COIECD's rule is pinned against hand-worked cases in tests/test_decoding_rules.py; used as is here
    from icr2_components.readers.decoding_rules.coiecd import coiecd_logits

    return coiecd_logits(z_c[None], z_m[None], 1.0, alpha=1.0, bound_ratio=4.0)[0][0]


class _ForwardCounter:
    """Input lengths of every forward pass of the shared SmolLM2."""

    def __init__(self, model):
        self.lengths = []
        self._hook = model.register_forward_pre_hook(
            lambda _m, args, kwargs: self.lengths.append(
                int(kwargs.get("input_ids", args[0] if args else None).shape[-1])
            ),
            with_kwargs=True,
        )

    def close(self):
        self._hook.remove()


@pytest.mark.parametrize("name, settings, combine", [
    ("cmt_cad", {"technique": "cad", "alpha": 0.5}, _cad(0.5)),
    ("cmt_acd", {"technique": "acd", "alpha": 1.0}, _acd),
    ("cmt_coiecd", {"technique": "coiecd", "alpha": 1.0, "coiecd_alpha": 1.0, "coiecd_bound_ratio": 4.0}, _coiecd),
])
def test_decoding_pipeline_loads_from_yaml_and_answers(name, settings, combine, nq_conflict, smollm2):
    """The YAML pipeline feeds the passages to the context prompt and the question alone to the memory prompt,
    the reader runs two passes per generated token with the YAML's settings, and its answer is the technique's
    greedy decoding recomputed here from the two prompts."""
    model, tokenizer = smollm2
    query, documents = nq_conflict
    spec = PipelineSpec.from_file(str(ROOT / "pipelines" / f"{name}.yaml"))
    assert spec.context_input == "prompt.documents"
    result = spec.run(query, documents, controlled=True, max_new_tokens=TOKENS)
    assert result["answer"].strip()
    assert result["prompt_tokens"] > 50
    pipeline = spec.pipeline(controlled=True)
    counter = _ForwardCounter(model)
    try:
        run = pipeline.run({"prompt": {"query": query, "documents": documents}, "memory_prompt": {"query": query},
                            "reader": {"max_new_tokens": TOKENS}}, include_outputs_from={"prompt", "memory_prompt"})
    finally:
        counter.close()
    reply = run["reader"]["replies"][0]
    assert reply.text == result["answer"]
    assert {key: reply.meta[key] for key in settings} == settings
    context_messages, memory_messages = run["prompt"]["prompt"], run["memory_prompt"]["prompt"]
    assert all(d.content in context_messages[-1].text for d in documents)
    assert query in memory_messages[-1].text and not any(d.content[:60] in memory_messages[-1].text for d in documents)
    assert reply.meta["prompt_tokens"] == result["prompt_tokens"] > reply.meta["memory_prompt_tokens"] + 50
    # two passes per generated token: the two prompts first, then one token on each cache per further step
    steps = reply.meta["completion_tokens"]
    assert counter.lengths == [reply.meta["prompt_tokens"], reply.meta["memory_prompt_tokens"]] + [1] * (
        2 * (steps - 1)
    )
    assert reply.text == _reference_decode(model, tokenizer, context_messages, memory_messages, combine, TOKENS)
