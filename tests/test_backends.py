"""The backend switch without a server: backend files, which components follow a backend, and the refusals.

Loading a pipeline does not call the server (the served reader connects on its first run), so every pipeline in
pipelines/ is checked here against the real backend files: black-box pipelines load with a ServedChatReader in
place of every LocalChatReader and token budgets counted by the server; white-box pipelines refuse at load,
naming the component and why.
"""

from pathlib import Path

import pytest
import yaml

from icr2_components.backends import BackendError, load_backend
from icr2_components.backends.pipelines import apply_backend, backend_from_dict, check_model_access, resolve_backend
from icr2_components.pipeline_loading import loads_pipeline
from icr2_components.pipeline_spec import PipelineSpec

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
PIPELINES = sorted((REPO / "pipelines").glob("*.yaml"))
LOCAL_READER = "icr2_components.readers.local_chat_reader.LocalChatReader"
SERVED_READER = "icr2_components.readers.served_chat_reader.ServedChatReader"
WHITE_BOX = {"rap", "cmt_cad", "cmt_acd", "cmt_coiecd", "cmt_ph3_context", "cmt_ph3_memory", "retrieval_head_ranked"}


@pytest.fixture(scope="module")
def llama_backend():
    return load_backend(REPO / "backends" / "llama_cpp_server.yaml")


def test_every_shipped_backend_file_parses():
    backends = {path.stem: load_backend(path) for path in sorted((REPO / "backends").glob("*.yaml"))}
    assert {"local", "llama_cpp_server", "vllm", "ollama", "openai", "tgi"} <= set(backends)
    assert backends["local"].kind_name == "local" and backends["local"].settings.model is None
    assert backends["local"].provides == {"weights", "tokenizer", "logprobs"}
    assert backends["llama_cpp_server"].kind_name == "served" and "weights" not in backends["llama_cpp_server"].provides
    served = backends["llama_cpp_server"].settings.served_model
    assert (served.api_base_url, served.model, served.context_length) == ("http://127.0.0.1:8089/v1",
                                                                         "smollm2-135m-instruct", 8192)
    assert backends["openai"].settings.served_model.api_key_env == "OPENAI_API_KEY"
    assert backends["ollama"].settings.served_model.tokenizer != "server"  # Ollama has no tokenize endpoint


@pytest.mark.parametrize("values, message", [
    ({"kind": "remote"}, "kind must be one of"),
    ({"kind": "served"}, "needs a `served_model:` mapping"),
    ({"kind": "served", "served_model": {"model": "m"}}, "set api_base_url"),
    ({"kind": "served", "served_model": {"api_base_url": "127.0.0.1:8089", "model": "m"}}, "http\\(s\\) URL"),
    ({"kind": "served", "served_model": {"api_base_url": "http://h/v1", "model": "m", "timeout_s": 0}}, "timeout_s"),
    ({"kind": "served", "served_model": {"api_base_url": "http://h/v1", "model": "m", "port": 1}}, "unknown key"),
    ({"kind": "local", "served_model": {"api_base_url": "http://h/v1"}}, "served_model is for kind: served"),
    ({"kind": "local", "temperature": 0}, "unknown key"),
    (["kind", "served"], "a mapping"),
])
def test_a_bad_backend_file_is_one_clear_error(values, message):
    with pytest.raises(BackendError, match=message):
        backend_from_dict(values, "backends/bad.yaml")


def test_a_missing_backend_names_the_available_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(BackendError, match=r"not found.*llama_cpp_server"):
        load_backend("backends/nope.yaml")
    assert load_backend("llama_cpp_server").name == "llama_cpp_server"  # a bare name is looked up in backends/


def test_resolve_backend_prefers_the_flag_then_the_environment(monkeypatch):
    monkeypatch.delenv("ICR2_BACKEND", raising=False)
    assert resolve_backend(None) is None
    monkeypatch.setenv("ICR2_BACKEND", str(REPO / "backends" / "llama_cpp_server.yaml"))
    assert resolve_backend(None).name == "llama_cpp_server"
    assert resolve_backend(str(REPO / "backends" / "local.yaml")).kind_name == "local"


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.stem)
def test_each_pipeline_follows_a_served_backend_or_refuses_naming_why(path, llama_backend):
    data = yaml.safe_load(path.read_text())
    if path.stem in WHITE_BOX:
        with pytest.raises(BackendError, match=r"needs the (weights|full logits).*exposes only generated tokens.*"
                                               r"Run it on the local backend.*vanilla_rag"):
            apply_backend(data, llama_backend, str(path))
        return
    served = apply_backend(data, llama_backend, str(path))
    types = [entry["type"] for entry in served["components"].values()]
    assert LOCAL_READER not in types
    assert types.count(SERVED_READER) == [e["type"] for e in data["components"].values()].count(LOCAL_READER)
    for name, entry in served["components"].items():
        parameters = entry.get("init_parameters") or {}
        original = data["components"][name].get("init_parameters") or {}
        if entry["type"] == SERVED_READER:
            assert parameters["api_base_url"] == "http://127.0.0.1:8089/v1"
            assert parameters["max_new_tokens"] == original.get("max_new_tokens", 64)
            assert parameters["temperature"] == 0.0
        elif original.get("tokenizer"):  # a token budget: counted by the server now
            assert parameters["tokenizer"] == "http://127.0.0.1:8089/v1#smollm2-135m-instruct"
    assert data == yaml.safe_load(path.read_text())  # the input dict is left as it was
    loads_pipeline(yaml.safe_dump(served), source=str(path))  # and the result is a valid, allowlisted pipeline


def test_the_spec_hash_covers_the_backend(llama_backend):
    local = PipelineSpec.from_file(str(REPO / "pipelines" / "closed_book.yaml"))
    served = PipelineSpec.from_file(str(REPO / "pipelines" / "closed_book.yaml"), backend=llama_backend)
    assert local.hash != served.hash  # compare's answer cache never mixes the two
    assert type(served.pipeline(False).get_component("reader")).__name__ == "ServedChatReader"
    assert served.backend is llama_backend


def test_a_local_backend_with_a_model_moves_readers_and_budgets_to_it():
    backend = backend_from_dict({"kind": "local", "model": "Qwen/Qwen2.5-1.5B-Instruct"}, name="bigger")
    data = yaml.safe_load((REPO / "pipelines" / "cic_rag_lost_in_the_middle.yaml").read_text())
    moved = apply_backend(data, backend, "cic_rag_lost_in_the_middle.yaml")
    readers = [e for e in moved["components"].values() if e["type"] == LOCAL_READER]
    assert readers and all(e["init_parameters"]["model"] == "Qwen/Qwen2.5-1.5B-Instruct" for e in readers)
    budgets = [e for e in moved["components"].values() if "tokenizer" in (e.get("init_parameters") or {})]
    assert budgets and all(e["init_parameters"]["tokenizer"] == "Qwen/Qwen2.5-1.5B-Instruct" for e in budgets)
    assert (
        apply_backend(data, backend_from_dict({"kind": "local"}, name="local"), "x") == data
    )  # the plain local backend changes nothing
    rap = apply_backend(yaml.safe_load((REPO / "pipelines" / "rap.yaml").read_text()), backend, "rap.yaml")
    assert rap["components"]["rap_filter"]["init_parameters"]["model"] == "Qwen/Qwen2.5-1.5B-Instruct"  # white-box too


def test_a_hand_written_pipeline_with_a_black_box_reader_and_a_white_box_filter_refuses_at_load():
    text = (REPO / "pipelines" / "rap.yaml").read_text()
    data = yaml.safe_load(text)
    data["components"]["reader"] = {
        "type": "haystack.components.generators.chat.openai.OpenAIChatGenerator",
        "init_parameters": {"model": "gpt-4o-mini", "api_base_url": "http://127.0.0.1:8089/v1"},
    }
    with pytest.raises(BackendError, match=r"'rap_filter' \(RetrievalAttentionFilter\).*reader 'reader' is a served"):
        check_model_access(data, "my_rap.yaml")
    with pytest.raises(BackendError, match="rap_filter"):
        loads_pipeline(yaml.safe_dump(data), source="my_rap.yaml")
