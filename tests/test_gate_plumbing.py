"""Plumbing of the gate with constructed parts: a tiny random Llama whose character-level tokenizer has no single
token for "Yes"/"No" (sequence log-probability fallback), and a stub ChatGenerator whose reply says neither."""

import pytest
import torch
from haystack import Pipeline, component
from haystack.dataclasses import ChatMessage

from icr2_components.gates import TimeAwareRetrievalGate


@pytest.fixture(scope="module")
def tiny_char_level_model_dir(tmp_path_factory):
    """A 2-layer random Llama and a character-level tokenizer (every answer is several tokens)."""
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<unk>", "<pad>", "<s>", "</s>"]
    characters = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {token: index for index, token in enumerate(specials + characters)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                        bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         pad_token_id=vocab["<pad>"], bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"])
    folder = tmp_path_factory.mktemp("tiny-char-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_plumbing_tokenizer_without_single_yes_no_tokens_falls_back_to_sequence_logprobs(tiny_char_level_model_dir):
    from icr2_components.models.cache import MODEL_CACHE

    gate = TimeAwareRetrievalGate(method="vanilla", model=str(tiny_char_level_model_dir),
                                  model_settings={"dtype": "float32", "device": "cpu"})
    decision = gate.run(query="Who won?")["decision"]
    assert decision["scoring"] == "sequence_logprob"
    model, tokenizer = MODEL_CACHE.causal_lm(str(tiny_char_level_model_dir), dtype="float32", device="cpu")
    text = decision["rendered_prompt"]
    assert text.endswith("<assistant>[")
    totals = []
    for answer in ("Yes", "No"):
        ids = tokenizer(text + answer, add_special_tokens=False)["input_ids"]
        start = len(ids) - len(answer)  # one token per character
        with torch.no_grad():
            logprobs = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0], dim=-1)
        totals.append(sum(float(logprobs[i - 1, ids[i]]) for i in range(start, len(ids))))
    assert decision["p_yes"] == pytest.approx(float(torch.softmax(torch.tensor(totals), 0)[0]), abs=1e-5)
    assert decision["retrieve"] == (decision["p_yes"] >= 0.5)


@component
class ScriptedChatGenerator:
    """A stand-in for an API chat generator: replies with a fixed text (plumbing only)."""

    def __init__(self, reply: str = "Maybe later.") -> None:
        self.reply = reply
        self.calls: list[list[ChatMessage]] = []

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage]):
        self.calls.append(messages)
        return {"replies": [ChatMessage.from_assistant(self.reply)]}


@pytest.mark.unit
def test_plumbing_api_reply_that_says_neither_follows_on_unparsed_and_is_counted():
    generator = ScriptedChatGenerator("It depends on the context.")
    gate = TimeAwareRetrievalGate(method="vanilla", chat_generator=generator, on_unparsed="retrieve")
    result = gate.run(query="Who won the 2025 NBA Finals?")
    assert result["retrieve"] == "Who won the 2025 NBA Finals?"
    assert result["decision"]["parsed"] is False and result["decision"]["p_yes"] is None
    assert gate.stats["unparsed_replies"] == 1
    assert "Who won the 2025 NBA Finals?" in generator.calls[0][0].text

    quiet = TimeAwareRetrievalGate(method="vanilla", chat_generator=generator, on_unparsed="no_retrieval")
    assert "no_retrieval" in quiet.run(query="Who won?")
    strict = TimeAwareRetrievalGate(method="vanilla", chat_generator=generator, on_unparsed="error")
    with pytest.raises(ValueError, match="neither yes nor no"):
        strict.run(query="Who won?")


@pytest.mark.unit
def test_plumbing_api_reply_yes_routes_in_a_pipeline_and_threshold_is_refused():
    gate = TimeAwareRetrievalGate(method="vanilla", chat_generator=ScriptedChatGenerator("[No]"))
    pipeline = Pipeline()
    pipeline.add_component("gate", gate)
    result = pipeline.run({"gate": {"query": "What is the capital of France?"}})
    assert result["gate"]["no_retrieval"] == "What is the capital of France?"
    assert "retrieve" not in result["gate"] and result["gate"]["decision"]["p_yes"] == 0.0
    with pytest.raises(ValueError, match="threshold"):
        TimeAwareRetrievalGate(method="threshold", chat_generator=ScriptedChatGenerator())


@pytest.mark.unit
def test_plumbing_a_nested_chat_generator_round_trips_through_yaml():
    """ScriptedChatGenerator has no to_dict of its own: the gate serialises it with component_to_dict, and
    Haystack's default_from_dict rebuilds it from its type."""
    gate = TimeAwareRetrievalGate(method="ta_are", chat_generator=ScriptedChatGenerator("[Yes]"), today="2025-06-01",
                                  n_yes=1, on_unparsed="no_retrieval")
    nested = gate.to_dict()["init_parameters"]["chat_generator"]
    assert nested == {"type": f"{ScriptedChatGenerator.__module__}.ScriptedChatGenerator",
                      "init_parameters": {"reply": "[Yes]"}}
    pipeline = Pipeline()
    pipeline.add_component("gate", gate)
    restored = Pipeline.loads(pipeline.dumps(), allowed_modules=["icr2_components.*", ScriptedChatGenerator.__module__])
    again = restored.get_component("gate")
    assert isinstance(again.chat_generator, ScriptedChatGenerator) and again.chat_generator.reply == "[Yes]"
    assert again.to_dict() == gate.to_dict()


@pytest.mark.unit
def test_plumbing_the_adaptive_rag_yaml_round_trips():
    from pathlib import Path

    from icr2_components.pipeline_loading import load_pipeline, loads_pipeline

    pipeline = load_pipeline(Path(__file__).resolve().parents[1] / "pipelines" / "adaptive_rag.yaml")
    gate = pipeline.get_component("gate")
    # the shipped gate: the learned one, with its shipped artifact (adaptive_rag.yaml, header)
    assert isinstance(gate, TimeAwareRetrievalGate) and gate.method == "learned" and gate.model is None
    assert gate.parameters_of().artifact == "adaptive_rag.learned"  # a shipped artifact, by name
    again = loads_pipeline(pipeline.dumps())
    assert again.to_dict()["components"] == pipeline.to_dict()["components"]
    def edges(p):
        return sorted((c["sender"], c["receiver"]) for c in p.to_dict()["connections"])

    assert edges(again) == edges(pipeline)
