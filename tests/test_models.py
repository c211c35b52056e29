"""The model resolver, the shared cache and the local reader, on the real bundled models."""

import os
from pathlib import Path

import pytest
from haystack import Pipeline
from haystack.components.builders import ChatPromptBuilder
from haystack.dataclasses import ChatMessage

from icr2_components.models import ModelResolutionError, resolve_model
from icr2_components.models.cache import MODEL_CACHE
from icr2_components.pipeline_loading import PipelineLoadError, loads_pipeline
from icr2_components.readers import LocalChatReader


def test_bundled_aliases_resolve_to_loadable_folders(smollm2, minilm):
    """The folders load, and what loads is the model the alias names (not only files that exist)."""
    import numpy as np

    folder = resolve_model("smollm2-135m-instruct")
    model, tokenizer = smollm2
    assert Path(model.config._name_or_path).resolve() == Path(folder).resolve()
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 30
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6  # SmolLM2-135M
    ids = tokenizer("The capital of France is")["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "The capital of France is"
    assert Path(resolve_model("All-MiniLM-L6-v2")) == Path(resolve_model("all-minilm-l6-v2"))  # case-insensitive
    vectors = minilm.encode(["Paris is the capital of France.", "The capital of France is Paris.",
                             "A spider has eight legs."], normalize_embeddings=True)
    assert vectors.shape == (3, 384)
    # a real sentence encoder: a paraphrase is nearer than an unrelated sentence
    assert float(np.dot(vectors[0], vectors[1])) > float(np.dot(vectors[0], vectors[2])) + 0.3


@pytest.mark.unit
def test_paths_and_hub_ids_pass_through_and_bad_names_fail_clearly(tmp_path):
    assert resolve_model(str(tmp_path)) == str(tmp_path.resolve())
    assert resolve_model("mistralai/Mistral-7B-Instruct-v0.2") == "mistralai/Mistral-7B-Instruct-v0.2"
    with pytest.raises(ModelResolutionError, match="does not exist"):
        resolve_model("./no/such/model")
    with pytest.raises(ModelResolutionError, match="non-empty string"):
        resolve_model("")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelResolutionError, match=r"config\.json"):
        resolve_model(str(tmp_path / "weights.bin"))


def test_cache_shares_one_copy_per_model_and_settings(smollm2):
    model, _tokenizer = smollm2
    again, _ = MODEL_CACHE.causal_lm("smollm2-135m-instruct", dtype="float32", device="cpu")
    assert again is model
    by_path, _ = MODEL_CACHE.causal_lm(resolve_model("smollm2-135m-instruct"), dtype="float32", device="cpu")
    assert by_path is model  # an alias and its path are the same model
    auto, _ = MODEL_CACHE.causal_lm("smollm2-135m-instruct", dtype="auto", device="cpu")
    assert auto is model  # "auto" resolves to float32 on a CPU: the same copy
    assert model.config.num_hidden_layers == 30 and model.config.num_attention_heads == 9
    assert model.config.num_key_value_heads == 3
    with pytest.raises(ValueError, match="dtype"):
        MODEL_CACHE.causal_lm("smollm2-135m-instruct", dtype="float8")


def test_local_chat_reader_answers_and_shares_the_cached_model(smollm2):
    reader = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=12, dtype="float32", device="cpu")
    reply = reader.run(messages=[ChatMessage.from_user("What is the capital of France?")])["replies"][0]
    assert "Paris" in reply.text
    assert reply.meta["prompt_tokens"] > 5 and 0 < reply.meta["completion_tokens"] <= 12
    assert reader.chat_model.model is smollm2[0]


def test_local_chat_reader_streams_pieces_that_make_the_reply(smollm2):
    """The streaming_callback gets the reply token by token (Haystack StreamingChunks), the pieces concatenate to
    exactly the reply's text, which is the one the same call gives unstreamed; a last chunk says why it ended."""
    reader = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=12, dtype="float32", device="cpu")
    for question, budget in (("What is the capital of France?", 12), ("Écris une phrase sur un café d'été.", 6)):
        chunks = []
        messages = [ChatMessage.from_user(question)]
        streamed = reader.run(messages=messages, max_new_tokens=budget, streaming_callback=chunks.append)["replies"][0]
        plain = reader.run(messages=messages, max_new_tokens=budget)["replies"][0]
        pieces = [chunk.content for chunk in chunks[:-1]]
        assert "".join(pieces) == streamed.text == plain.text and len(pieces) > 2 and all(pieces)
        assert chunks[0].start and not any(chunk.start for chunk in chunks[1:])
        assert chunks[-1].content == "" and chunks[-1].finish_reason == streamed.meta["finish_reason"]
        assert chunks[-1].meta["completion_tokens"] == streamed.meta["completion_tokens"]
        assert chunks[0].component_info.type.endswith("LocalChatReader")
    assert streamed.meta["finish_reason"] == "length" and streamed.meta["completion_tokens"] == 6
    with pytest.raises(TypeError, match="callable"):
        reader.run(messages=messages, streaming_callback="print")


def test_local_chat_reader_refuses_prompts_beyond_its_context_with_the_limit(smollm2):
    reader = LocalChatReader(max_new_tokens=8, max_input_tokens=64, dtype="float32", device="cpu")
    with pytest.raises(ValueError, match=r"accepts 56 "):
        reader.run(messages=[ChatMessage.from_user("word " * 200)])
    with pytest.raises(ValueError, match=r"accepts 44 .*max_new_tokens=20"):  # the call's budget, not the init one
        reader.run(messages=[ChatMessage.from_user("word " * 200)], max_new_tokens=20)
    with pytest.raises(ValueError, match="max_new_tokens"):
        LocalChatReader(max_new_tokens=0)
    with pytest.raises(ValueError, match="messages must be a non-empty list"):
        reader.run(messages=[])


def test_reader_pipeline_round_trips_through_yaml_on_the_allowlist():
    pipeline = Pipeline()
    pipeline.add_component(
        "prompt",
        ChatPromptBuilder(
            template=[ChatMessage.from_user("Answer briefly: {{question}}")], required_variables=["question"]
        ),
    )
    pipeline.add_component("reader", LocalChatReader(max_new_tokens=10, dtype="float32", device="cpu"))
    pipeline.connect("prompt.prompt", "reader.messages")
    loaded = loads_pipeline(pipeline.dumps())
    reply = loaded.run({"prompt": {"question": "What is the capital of Italy?"}})["reader"]["replies"][0]
    assert "Rome" in reply.text


@pytest.mark.unit
def test_modules_outside_the_allowlist_are_refused():
    yaml_text = """
components:
  evil:
    type: os.system
    init_parameters: {}
connections: []
"""
    with pytest.raises(PipelineLoadError, match=r"allowlist|allowed|icr2_components"):
        loads_pipeline(yaml_text, source="evil.yaml")


_ENV_DEFAULTS = {"HAYSTACK_TELEMETRY_ENABLED": "False", "RAGAS_DO_NOT_TRACK": "true", "HF_HUB_OFFLINE": "1",
                 "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


def _python(code: str, **extra_env: str) -> dict:
    """Run ``code`` in a fresh interpreter whose environment has none of the defaults (tests/conftest.py sets
    some of them in this process, so only a clean subprocess shows what the package itself does)."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in _ENV_DEFAULTS}
    env.update(extra_env)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


_NAMES = repr(sorted(_ENV_DEFAULTS))  # the variables' names, as a list literal in the child's code
_REPORT = "import json, os; print(json.dumps({k: os.environ.get(k) for k in " + _NAMES + "}))"


def test_importing_the_package_and_its_components_sets_no_environment_variable():
    before = _python(_REPORT)
    assert all(value is None for value in before.values()), before  # the subprocess really starts without them
    after = _python("import icr2_components, icr2_components.builders, icr2_components.reorderers, "
                    "icr2_components.readers, icr2_components.gates, icr2_components.pipeline_loading; " + _REPORT)
    assert after == before


def test_the_icr2_entry_switches_telemetry_off_before_haystack_is_imported():
    """The entry point imports nothing heavy before it sets the defaults, so Haystack (imported by the commands)
    reads HAYSTACK_TELEMETRY_ENABLED=False and creates no telemetry client; a value the user chose is kept."""
    code = ("import json, sys; from icr2_components import cli; assert 'haystack' not in sys.modules; cli.main([]); "
            "from haystack.telemetry import _telemetry; import os; "
            "print(json.dumps({'client': _telemetry.telemetry is not None, "
            "**{k: os.environ.get(k) for k in " + _NAMES + "}}))")
    assert _python(code) == {"client": False, **_ENV_DEFAULTS}
    kept = _python(code, HF_HUB_OFFLINE="0", HAYSTACK_TELEMETRY_ENABLED="True")
    assert {k: v for k, v in kept.items() if k != "client"} == {**_ENV_DEFAULTS, "HF_HUB_OFFLINE": "0",
                                                                  "HAYSTACK_TELEMETRY_ENABLED": "True"}


def test_the_icr2_cli_entry_applies_the_defaults_itself(monkeypatch, capsys):
    """``icr2`` (icr2_components.cli:main) sets the defaults even when they were removed after import."""
    from icr2_components.cli import main

    for key in _ENV_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    assert main([]) == 2  # no command: prints the help
    assert "COMMAND" in capsys.readouterr().out
    assert {key: os.environ.get(key) for key in _ENV_DEFAULTS} == _ENV_DEFAULTS


def test_introspection_reads_every_family_s_context_length_key_once_for_all_components():
    from types import SimpleNamespace

    from icr2_components.models.introspection import UNSTATED_CONTEXT_LIMIT, context_limit, stated_context_length
    from icr2_components.training.model_loading import effective_max_length

    llama, gpt2, bare = (SimpleNamespace(max_position_embeddings=8192), SimpleNamespace(n_positions=1024),
                         SimpleNamespace())
    assert [stated_context_length(c) for c in (llama, gpt2, bare)] == [8192, 1024, None]
    assert context_limit(SimpleNamespace(config=gpt2)) == 1024  # the reader once read max_position_embeddings only
    assert context_limit(SimpleNamespace(config=gpt2), 300) == 300
    assert context_limit(SimpleNamespace(config=bare)) == UNSTATED_CONTEXT_LIMIT
    assert effective_max_length(gpt2, None) == 1024
    assert effective_max_length(bare, 512) == 512  # the error's advice (set max_seq_length) now works
    with pytest.raises(ValueError, match=r"states no context length.*set max_seq_length"):
        effective_max_length(bare, None)
