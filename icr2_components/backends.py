"""The one switch that picks where a pipeline's language model runs, without copying any pipeline YAML.

A backend file (``backends/*.yaml``) says where the model is:

```yaml
# backends/llama_cpp_server.yaml: llama.cpp's OpenAI-compatible server (bash scripts/llama_server.sh start)
kind: served
served_model:
  api_base_url: http://127.0.0.1:8089/v1
  model: smollm2-135m-instruct
  context_length: 8192
```

``kind: local`` keeps the model in this process (transformers), optionally another one (``model: Qwen/...``);
``kind: served`` puts it behind an OpenAI-compatible server (vLLM, llama.cpp, Ollama, TGI, OpenAI; the keys of
:class:`~icr2_components.models.served_model.ServedModel`). ``icr2 compare|serve|quickstart --backend FILE``
(or ``ICR2_BACKEND=FILE``) applies it to every pipeline they load: each component whose class knows how to
follow a backend rewrites its own entry (``backend_variant``: the local reader becomes a ``ServedChatReader``,
the gate asks the server, the token budgets count with the served tokenizer); a component that needs the
weights (``requires_model_weights``: RAP, CAD/ACD/COIECD, PH3 suppression, the retrieval-head ranker) refuses,
naming why and what to use. Components that know nothing of models (retrievers, joiners, prompt builders) are
left as they are.

The same refusal guards hand-written YAML: :func:`check_model_access` refuses, at load, any pipeline that has a
black-box reader (one marked ``black_box``, or Haystack's API chat generators) beside a white-box component.

Usage example:
```python
from icr2_components.backends import load_backend
from icr2_components.pipeline_spec import PipelineSpec

backend = load_backend("backends/llama_cpp_server.yaml")
spec = PipelineSpec.from_file("pipelines/vanilla_rag.yaml", backend=backend)
print(spec.run("Who wrote Hamlet?", None, controlled=False)["answer"])
```
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from icr2_components.errors import UserInputError
from icr2_components.models.served_model import ServedModel

BACKEND_ENV = "ICR2_BACKEND"
KINDS = ("local", "served")
BLACK_BOX_TYPES = (
    # Haystack's API generators: the model is elsewhere, only tokens come back.
    "haystack.components.generators.chat.openai.OpenAIChatGenerator",
    "haystack.components.generators.chat.azure.AzureOpenAIChatGenerator",
    "haystack_integrations.components.generators.ollama.chat.chat_generator.OllamaChatGenerator",
    # llama.cpp in process: the weights are here, but the integration exposes no attention or logits hook.
    "haystack_integrations.components.generators.llama_cpp.chat.chat_generator.LlamaCppChatGenerator",
)
BLACK_BOX_PIPELINES_HINT = ("closed_book, vanilla_rag, corpus_in_context, query_aware, reordered_*, reranked_bi_encoder, "
                            "oracle, adaptive_rag, cmt_multi_agent, cmt_prompting")


class BackendError(UserInputError):
    """A backend file is malformed, or a pipeline cannot run on the backend it was given."""


@dataclass(frozen=True)
class Backend:
    """Where the language model of a pipeline runs: ``local`` (optionally another ``model``) or ``served``."""

    name: str
    kind: str = "local"
    served_model: ServedModel | None = None
    model: str | None = None
    source: str = "<backend>"

    @property
    def is_served(self) -> bool:
        return self.kind == "served"

    def describe(self) -> str:
        if self.served_model is not None:
            return f"{self.name} ({self.served_model.model} at {self.served_model.api_base_url})"
        return f"{self.name} (local{': ' + self.model if self.model else ''})"


def backend_from_dict(values: Any, source: str = "<backend>", name: str | None = None) -> Backend:
    """A :class:`Backend` from a parsed backend file; one clear line per problem."""
    if not isinstance(values, dict):
        raise BackendError(f"{source}: a backend file is a mapping with `kind: local` or `kind: served`.")
    known = {"kind", "served_model", "model", "description"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise BackendError(f"{source}: unknown key(s) {unknown}; a backend file has {sorted(known)}.")
    kind = values.get("kind", "local")
    if kind not in KINDS:
        raise BackendError(f"{source}: kind must be one of {KINDS}, got {kind!r}.")
    name = name or Path(source).stem
    if kind == "served":
        served = values.get("served_model")
        if not isinstance(served, dict):
            raise BackendError(f"{source}: kind: served needs a `served_model:` mapping (api_base_url, model, ...).")
        if values.get("model"):
            raise BackendError(f"{source}: `model` is for kind: local; a served model is served_model.model.")
        try:
            served_model = ServedModel.from_dict(served, f"{source}: served_model")
        except UserInputError as error:
            raise BackendError(str(error) if str(error).startswith(source) else f"{source}: {error}") from error
        return Backend(name=name, kind=kind, served_model=served_model, source=source)
    if values.get("served_model"):
        raise BackendError(f"{source}: served_model is for kind: served.")
    model = values.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise BackendError(f"{source}: model must be a Hugging Face id, local path or bundled alias, got {model!r}.")
    return Backend(name=name, kind="local", model=model, source=source)


def load_backend(path: str | os.PathLike) -> Backend:
    """Read ``backends/<name>.yaml`` (a bare name is looked up in ``backends/``)."""
    file = Path(path)
    if not file.exists() and not file.suffix and (Path("backends") / f"{file}.yaml").exists():
        file = Path("backends") / f"{file}.yaml"
    if not file.exists():
        available = sorted(p.stem for p in Path("backends").glob("*.yaml")) if Path("backends").is_dir() else []
        raise BackendError(f"Backend file not found: {path}" + (f" (backends/ has {available})" if available else "")
                           + ".")
    try:
        values = yaml.safe_load(file.read_text())
    except yaml.YAMLError as error:
        raise BackendError(f"{file} is not valid YAML: {' '.join(str(error).split())}") from error
    return backend_from_dict(values, str(file))


def backend_from_environment() -> Backend | None:
    """The backend named by ``ICR2_BACKEND`` (a file or a name in ``backends/``), or None."""
    value = os.environ.get(BACKEND_ENV)
    return load_backend(value) if value else None


def resolve_backend(value: str | os.PathLike | Backend | None) -> Backend | None:
    """The backend a command runs on: ``--backend`` when given, else ``ICR2_BACKEND``, else None (the pipelines'
    own models). ``local`` (a file with ``kind: local`` and no model) changes nothing."""
    if isinstance(value, Backend):
        return value
    if value:
        return load_backend(value)
    return backend_from_environment()


def component_class(type_name: Any) -> type | None:
    """The class a pipeline entry names, when it is importable; None otherwise (the loader reports that)."""
    if not isinstance(type_name, str) or "." not in type_name:
        return None
    module_name, _, class_name = type_name.rpartition(".")
    if not (module_name.startswith("icr2_components.") or module_name.startswith("haystack")):
        return None  # other packages are refused or imported by the allowlisted loader, not here
    try:
        return getattr(importlib.import_module(module_name), class_name, None)
    except ImportError:
        return None


def _entries(data: dict) -> dict[str, dict]:
    components = data.get("components") if isinstance(data, dict) else None
    return {k: v for k, v in components.items() if isinstance(v, dict)} if isinstance(components, dict) else {}


def is_black_box(type_name: Any) -> bool:
    cls = component_class(type_name)
    return type_name in BLACK_BOX_TYPES or bool(cls is not None and getattr(cls, "black_box", False))


def weights_reason(type_name: Any) -> str | None:
    cls = component_class(type_name)
    reason = getattr(cls, "requires_model_weights", None) if cls is not None else None
    return reason if isinstance(reason, str) and reason else None


def _refusal(source: str, needing: list[tuple[str, str, str]], why: str) -> BackendError:
    parts = "; ".join(f"component '{name}' ({type_name.rsplit('.', 1)[-1]}) {reason}" for name, type_name, reason in needing)
    return BackendError(
        f"{source}: {parts}, but {why} exposes only generated tokens and their log-probabilities. Run it on the "
        f"local backend (drop --backend / ICR2_BACKEND), or use a black-box pipeline: {BLACK_BOX_PIPELINES_HINT}."
    )


def check_model_access(data: dict, source: str) -> None:
    """Refuse a pipeline whose reader is a black box (served) while another component needs model weights."""
    entries = _entries(data)
    black_box = [name for name, entry in entries.items() if is_black_box(entry.get("type"))]
    if not black_box:
        return
    needing = [(name, entry["type"], reason) for name, entry in entries.items()
               if (reason := weights_reason(entry.get("type")))]
    if needing:
        raise _refusal(source, needing, f"its reader '{black_box[0]}' is a served model, which")


def backend_tokenizer(backend: Backend) -> str | None:
    """What a component's ``tokenizer`` parameter should hold under ``backend`` (None: keep its own)."""
    if backend.served_model is not None:
        return backend.served_model.tokenizer_spec()
    return backend.model


def follow_tokenizer(type_name: str, init_parameters: dict, backend: Backend, parameter: str = "tokenizer") -> dict | None:
    """The entry of a token-counting component under ``backend``: its ``tokenizer`` (when it counts at all)
    becomes the backend model's, so budgets are in the tokens of the model that reads the prompt."""
    tokenizer = backend_tokenizer(backend)
    if not init_parameters.get(parameter) or tokenizer is None:
        return None
    return {"type": type_name, "init_parameters": {**init_parameters, parameter: tokenizer}}


def follow_local_model(cls: type, init_parameters: dict, backend: Backend) -> dict | None:
    """``backend_variant`` of a white-box component (bind it with ``classmethod``): on a local backend naming
    another model it uses that model; a served backend refused it before this is asked."""
    if backend.served_model is None and backend.model and "model" in init_parameters:
        return {"type": f"{cls.__module__}.{cls.__name__}", "init_parameters": {**init_parameters, "model": backend.model}}
    return None


def apply_backend(data: dict, backend: Backend | None, source: str) -> dict:
    """The pipeline dict with every model-using component following ``backend`` (a new dict; ``data`` unchanged).

    A component class takes part by defining ``backend_variant(init_parameters, backend) -> dict | None`` (its
    new ``{"type", "init_parameters"}`` entry, or None to stay) and, when it needs the weights,
    ``requires_model_weights`` (a phrase saying why); served backends refuse those.
    """
    if backend is None:
        return data
    entries = _entries(data)
    if backend.is_served:
        needing = [(name, entry["type"], reason) for name, entry in entries.items()
                   if (reason := weights_reason(entry.get("type")))]
        if needing:
            raise _refusal(source, needing, f"the backend {backend.describe()}")
    new_components: dict[str, Any] = {}
    for name, entry in (data.get("components") or {}).items():
        cls = component_class(entry.get("type")) if isinstance(entry, dict) else None
        variant_of = getattr(cls, "backend_variant", None) if cls is not None else None
        variant = variant_of(dict(entry.get("init_parameters") or {}), backend) if callable(variant_of) else None
        new_components[name] = variant if variant is not None else entry
    return {**data, "components": new_components}


__all__ = ["BACKEND_ENV", "Backend", "BackendError", "apply_backend", "backend_tokenizer", "follow_local_model", "follow_tokenizer", "backend_from_dict", "backend_from_environment",
           "check_model_access", "is_black_box", "load_backend", "resolve_backend"]
