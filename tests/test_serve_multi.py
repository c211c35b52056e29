"""Several pipelines in one ``icr2 serve`` app: ``vanilla_rag`` and ``rap`` (real SmolLM2, the bundled KILT
sample index) each at its own run route and as its own model, sharing one loaded reader and one index handle
(checked by identity), and the chat route sending each model's request to its own pipeline. In-process: the real
app through Starlette's test client."""

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from icr2_components.errors import UserInputError
from icr2_components.serving import create_serving_app
from icr2_components.serving.pipelines import held_objects, pipeline_sources, shared_objects
from icr2_components.stores.handle import IndexHandle

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Who wrote Hamlet?"


@pytest.fixture(scope="module")
def app():
    return create_serving_app(["vanilla_rag", "rap"], max_new_tokens=4)


@pytest.fixture(scope="module")
def http(app):
    with TestClient(app) as client:
        yield client


def component(app, pipeline: str, name: str):
    return app.state.icr2_pipelines[pipeline].wrapper.pipeline.get_component(name)


def test_shared_models_and_indexes_are_loaded_once(app):
    import torch

    vanilla_reader = [o for o in held_objects(component(app, "vanilla_rag", "reader"))
                      if isinstance(o, torch.nn.Module)]
    rap_reader = [o for o in held_objects(component(app, "rap", "reader")) if isinstance(o, torch.nn.Module)]
    assert vanilla_reader and vanilla_reader[0] is rap_reader[0]  # one copy of SmolLM2's weights
    vanilla_index = [o for o in held_objects(component(app, "vanilla_rag", "retriever")) if isinstance(o, IndexHandle)]
    rap_indexes = [o for name, c in app.state.icr2_pipelines["rap"].wrapper.pipeline.walk()
                   for o in held_objects(c) if isinstance(o, IndexHandle)]
    assert vanilla_index and all(handle is vanilla_index[0] for handle in rap_indexes) and rap_indexes
    shared = shared_objects(app.state.icr2_pipelines)
    holders = next(where for where in shared.values() if "vanilla_rag.reader" in where)
    assert "rap.reader" in holders, shared


def test_each_pipeline_answers_at_its_route_and_as_its_model(http):
    assert [m["id"] for m in http.get("/v1/models").json()["data"]] == ["vanilla_rag", "rap"]
    assert http.get("/status").json()["pipelines"] == ["vanilla_rag", "rap"]
    assert http.get("/health/ready").json()["status"] == "ready"
    for name in ("vanilla_rag", "rap"):
        run = http.post(f"/{name}/run", json={"query": QUESTION})
        assert run.status_code == 200 and run.json()["result"]["replies"][0].strip(), run.text
        chat = http.post("/v1/chat/completions", json={"model": name, "messages": [{"role": "user",
                                                                                   "content": QUESTION}]})
        assert chat.status_code == 200 and chat.json()["model"] == name, chat.text
        # each answers from its own pipeline: the same reply as its run route (greedy decoding)
        assert chat.json()["choices"][0]["message"]["content"] == run.json()["result"]["replies"][0]
    paths = http.get("/openapi.json").json()["paths"]
    assert {"/vanilla_rag/run", "/rap/run", "/health/live", "/health/ready"} <= set(paths)


def test_a_pipeline_that_is_not_served_is_404(http):
    assert http.post("/closed_book/run", json={"query": QUESTION}).status_code == 404
    missing = http.post("/v1/chat/completions", json={"model": "closed_book", "messages": [
        {"role": "user", "content": QUESTION}]})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert "vanilla_rag" in missing.json()["error"]["message"] and "rap" in missing.json()["error"]["message"]


@pytest.mark.unit
def test_pipelines_are_named_by_name_file_or_folder(tmp_path):
    (tmp_path / "b.yaml").write_text("x")
    (tmp_path / "a.yaml").write_text("x")
    (tmp_path / "notes.txt").write_text("x")
    assert pipeline_sources(["vanilla_rag", str(tmp_path)]) == ["vanilla_rag", str(tmp_path / "a.yaml"),
                                                                 str(tmp_path / "b.yaml")]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserInputError, match="holds no pipeline"):
        pipeline_sources([str(empty)])


def test_two_pipelines_of_one_name_are_refused():
    with pytest.raises(UserInputError, match="served already"):
        create_serving_app(["closed_book", str(ROOT / "pipelines" / "closed_book.yaml")], load_in_background=True)
