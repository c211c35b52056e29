"""The pipelines one ``icr2 serve`` process answers: ``icr2 serve vanilla_rag rap adaptive_rag`` (shipped names,
pipeline YAML files, or a folder of them), each at ``POST /<name>/run`` and as the model ``<name>`` of the
OpenAI-compatible API.

Each pipeline is a ``DeclaredPipelineWrapper`` (a hayhooks ``BasePipelineWrapper``). What pipelines share is
loaded once for the whole process by the caches their components already use: the process-wide model cache
(``icr2_components.models.cache.MODEL_CACHE``: one copy of a reader's weights, keyed by path, dtype, device and
attention implementation) and the index handles (``icr2_components.stores.handle.open_index``: one store and one
embedder per index config), so three pipelines over the same reader and index hold one reader and one index.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from icr2_components.backends import Backend
from icr2_components.errors import UserInputError
from icr2_components.pipeline_spec import PipelineSpec
from icr2_components.serving.pipeline_wrapper import DeclaredPipelineWrapper
from icr2_components.serving.request_model import DEFAULT_MAX_QUERY_CHARS, build_request_model


@dataclass
class ServedPipeline:
    """One served pipeline: its spec, its wrapper, the request model of its run route and that route's path."""

    spec: PipelineSpec
    wrapper: DeclaredPipelineWrapper
    request_model: type[BaseModel]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def run_path(self) -> str:
        return f"/{self.spec.name}/run"


def pipeline_sources(arguments: str | os.PathLike | list | tuple) -> list[str]:
    """The pipelines ``arguments`` name, in order: each a shipped name or a YAML path, a folder standing for its
    ``*.yaml`` files (sorted by name).

    :raises UserInputError: no pipeline, or a folder holding no ``.yaml`` file.
    """
    items = [arguments] if isinstance(arguments, str | os.PathLike) else list(arguments)
    if not items:
        raise UserInputError("icr2 serve needs at least one pipeline: a shipped name (e.g. vanilla_rag), a YAML "
                             "file or a folder of them.")
    sources: list[str] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            found = sorted(str(file) for file in path.iterdir() if file.suffix in (".yaml", ".yml") and file.is_file())
            if not found:
                raise UserInputError(f"{item}: the folder holds no pipeline .yaml file; give pipeline files, a "
                                     "folder of them or shipped names.")
            sources += found
        else:
            sources.append(str(item))
    return sources


def load_served_pipelines(arguments: str | os.PathLike | list | tuple, *, backend: Backend | None = None,
                          max_new_tokens: int | None = None, concurrency: int = 1,
                          max_query_chars: int = DEFAULT_MAX_QUERY_CHARS) -> dict[str, ServedPipeline]:
    """Load and check every pipeline ``arguments`` name (``pipeline_sources``), not yet warmed up (the wrappers'
    ``setup`` loads the models).

    :param concurrency: pipeline runs at once, for each pipeline.
    :returns: name -> ``ServedPipeline``, in the order given.
    :raises UserInputError: two pipelines with the same name (each name is a route and a model).
    """
    served: dict[str, ServedPipeline] = {}
    origins: dict[str, str] = {}
    for source in pipeline_sources(arguments):
        spec = PipelineSpec.from_file(source, backend=backend)  # allowlisted load, declared IO checked
        if spec.name in served:
            raise UserInputError(f"{source}: a pipeline named {spec.name!r} is served already (from "
                                 f"{origins[spec.name]}); each name is a route and a model, so serve one of them "
                                 "(or rename a copy).")
        origins[spec.name] = source
        served[spec.name] = ServedPipeline(
            spec=spec, request_model=build_request_model(spec, max_query_chars=max_query_chars),
            wrapper=DeclaredPipelineWrapper(spec, max_new_tokens=max_new_tokens, concurrency=concurrency))
    return served


def held_objects(component: Any, depth: int = 2) -> list[Any]:
    """The loaded models (``torch.nn.Module``) and index handles a component holds, found through its attributes
    (``depth`` levels: a reader holds a chat model that holds the weights)."""
    import torch

    from icr2_components.stores.handle import IndexHandle

    found: list[Any] = []
    seen: set[int] = set()

    def visit(value: Any, level: int) -> None:
        if id(value) in seen or value is None or isinstance(value, str | int | float | bool | bytes):
            return
        seen.add(id(value))
        if isinstance(value, torch.nn.Module | IndexHandle):
            found.append(value)
            return
        if level == 0:
            return
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else (
            vars(value).values() if hasattr(value, "__dict__") else ())
        for child in children:
            visit(child, level - 1)

    visit(component, depth)
    return found


def shared_objects(served: dict[str, ServedPipeline]) -> dict[int, list[str]]:
    """What the served (warmed-up) pipelines' components hold in common, by identity: ``{id(object):
    ["pipeline.component", ...]}`` for each loaded model or index handle that more than one component holds."""
    holders: dict[int, list[str]] = {}
    for name, pipeline in served.items():
        graph = pipeline.wrapper.pipeline
        if graph is None:
            continue
        for component_name, component in graph.walk():
            for held in held_objects(component):
                holders.setdefault(id(held), []).append(f"{name}.{component_name}")
    return {key: where for key, where in holders.items() if len(where) > 1}


__all__ = ["ServedPipeline", "held_objects", "load_served_pipelines", "pipeline_sources", "shared_objects"]
