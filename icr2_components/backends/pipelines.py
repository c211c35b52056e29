"""The one switch that picks where a pipeline's language model runs, without copying any pipeline YAML.

A backend file (``backends/*.yaml``) says where the model is:

```yaml
# backends/llama_cpp_server.yaml: llama.cpp's OpenAI-compatible server (bash scripts/llama_server.sh start)
kind: served
served_model:
  api_base_url: http://127.0.0.1:8089/v1
  model: smollm2-135m-instruct
  context_length: 8192
max_concurrency: 4         # requests sent at once (compare, label-retrieval-need, eval-gate, serve): the server's slots
```

``kind`` names a registered backend kind (``backends/kind.py``; one file each: ``local.py`` keeps the model in
this process, optionally another one, ``served.py`` puts it behind an OpenAI-compatible server). ``icr2
compare|serve|quickstart --backend FILE`` (or ``ICR2_BACKEND=FILE``) applies it to every pipeline they load:
each component declares what it needs of the model (``model_needs``) and its role (``backend_role``), and the
kind rewrites its entry (a served kind makes the local reader a ``ServedChatReader``, the gate ask the server,
the token budgets count with the served tokenizer) or refuses a component needing what it does not provide
(RAP, CAD/ACD/COIECD, PH3 suppression, the retrieval-head ranker need the weights), naming why and what to use.
Components that know nothing of models (retrievers, joiners, prompt builders) are left as they are.

The same refusal guards hand-written YAML: :func:`check_model_access` refuses, at load, any pipeline that has a
black-box reader (one marked ``black_box``, or Haystack's API chat generators) beside a white-box component.

Usage example:
```python
from icr2_components import load_pipeline, technique_component

pipeline = load_pipeline("vanilla_rag", backend="llama_cpp_server")  # its reader asks the served model
question = "Who wrote Hamlet?"
print(pipeline.run({"retriever": {"query": question}, "prompt": {"query": question}})["reader"]["replies"][0].text)
rag = technique_component("vanilla_rag", backend="llama_cpp_server")  # the same, as one component
```
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import yaml

from icr2_components.backends.kind import Backend, BackendError, backend_kind_class, backend_kind_names
from icr2_components.concurrency import check_concurrency
from icr2_components.strict_mapping import with_yaml_line

BACKEND_ENV = "ICR2_BACKEND"
BLACK_BOX_TYPES = (
    # Haystack's API generators: the model is elsewhere, only tokens come back.
    "haystack.components.generators.chat.openai.OpenAIChatGenerator",
    "haystack.components.generators.chat.azure.AzureOpenAIChatGenerator",
    "haystack_integrations.components.generators.ollama.chat.chat_generator.OllamaChatGenerator",
    # llama.cpp in process: the weights are here, but the integration exposes no attention or logits hook.
    "haystack_integrations.components.generators.llama_cpp.chat.chat_generator.LlamaCppChatGenerator",
)
BLACK_BOX_PIPELINES_HINT = (
    "closed_book, vanilla_rag, corpus_in_context, query_aware, reordered_*, reranked_bi_encoder, "
    "oracle, adaptive_rag, cmt_multi_agent, cmt_prompting"
)


def backend_from_dict(values: Any, source: str = "<backend>", name: str | None = None) -> Backend:
    """A :class:`Backend` from a parsed backend file: its ``kind`` (a registered :class:`BackendKind`, ``local`` when
    left out) reads the other keys into its own settings; one clear line per problem."""
    if not isinstance(values, dict):
        raise BackendError(f"{source}: a backend file is a mapping with `kind:` ({', '.join(backend_kind_names())}).")
    kind_class = backend_kind_class(values.get("kind", "local")) if "kind" in values else backend_kind_class("local")
    settings = kind_class.settings_from({k: v for k, v in values.items()
                                         if k not in ("kind", "description", "max_concurrency")}, source)
    max_concurrency = values.get("max_concurrency")
    if max_concurrency is not None:
        check_concurrency(max_concurrency, f"{source}: max_concurrency")
        if kind_class.max_concurrency is None and max_concurrency != 1:
            raise BackendError(f"{source}: max_concurrency is for a kind that serves requests at once (served); "
                               f"kind: {kind_class.name} answers one request at a time.")
    return Backend(name=name or Path(source).stem, kind=kind_class(settings), source=source,
                   max_concurrency=max_concurrency)


def request_concurrency(backend: Backend | None, requested: int | None = None) -> int:
    """Requests a command sends at once: ``requested`` (``--concurrency``) when given, else the backend's
    (``max_concurrency`` in its file, else its kind's default), else 1. More than 1 needs a kind that serves
    requests at once: in-process models (and the hooks white-box components set on them) are not shared between
    threads."""
    if requested is not None:
        check_concurrency(requested, "--concurrency")
    value = requested if requested is not None else (backend.concurrency if backend is not None else 1)
    if value > 1 and (backend is None or backend.kind.max_concurrency is None):
        raise BackendError(f"--concurrency {value} needs a served backend (--backend backends/<server>.yaml): "
                           "in-process models answer one request at a time.")
    return value


def load_backend(path: str | os.PathLike) -> Backend:
    """Read a backend file: a path, or a shipped backend's name (``llama_cpp_server``, ``ollama``, ...)."""
    from icr2_components.resources import shipped_names
    from icr2_components.resources.lookup import resolve_file

    try:
        file = resolve_file("backends", path)
    except FileNotFoundError as error:
        raise BackendError(str(error)) from None
    if not file.exists():
        shipped = ", ".join(shipped_names("backends"))
        raise BackendError(f"Backend file not found: {path} (shipped backends: {shipped}).")
    if file.is_dir():
        raise BackendError(f"{path} is a folder; give a backend file (backends/*.yaml) or a shipped backend's name.")
    try:
        text = file.read_text()
        values = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise BackendError(f"{file} is not valid YAML: {' '.join(str(error).split())}") from error
    try:
        return backend_from_dict(values, str(file))
    except BackendError as error:  # the line of the key it names, when the file has that key
        located = with_yaml_line(error, text, str(file))
        if located is error:
            raise
        raise located from None


def given_backend(backend: Any) -> Backend | None:
    """``backend`` as a ``Backend``: None stays None, a ``Backend`` is itself, a path or shipped name is read
    (``load_backend``); what a loader of pipelines takes as its ``backend`` argument.

    :raises BackendError: anything else (named, with its type), or a file ``load_backend`` refuses.
    """
    if backend is None or isinstance(backend, Backend):
        return backend
    if not isinstance(backend, (str, os.PathLike)):
        raise BackendError(f"backend must be a Backend, a backend file's path or a shipped backend's name, got "
                           f"{type(backend).__name__} {backend!r:.60}.")
    return load_backend(backend)


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
    """Why a component needs the model's weights (its ``model_needs["weights"]``), or None."""
    cls = component_class(type_name)
    reason = (getattr(cls, "model_needs", None) or {}).get("weights") if cls is not None else None
    return reason if isinstance(reason, str) and reason else None


def _refusal(source: str, needing: list[tuple[str, str, str]], why: str) -> BackendError:
    parts = "; ".join(
        f"component '{name}' ({type_name.rsplit('.', 1)[-1]}) {reason}" for name, type_name, reason in needing
    )
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


def apply_backend(data: dict, backend: Backend | None, source: str) -> dict:
    """The pipeline dict with every model-using component following ``backend`` (a new dict; ``data`` unchanged).

    A component class takes part by declaring ``model_needs`` (need -> why: ``weights``, ``tokenizer``,
    ``logprobs``) and ``backend_role`` (``chat_reader``, ``yes_no_asker``, ``white_box``, ``token_budget``). The
    backend's kind refuses components needing what it does not provide, and rewrites each entry for its role.
    """
    if backend is None:
        return data
    needing = []
    for name, entry in _entries(data).items():
        cls = component_class(entry.get("type"))
        missing = backend.missing(cls) if cls is not None else {}
        if missing:
            needing.append((name, entry["type"], "; ".join(missing.values())))
    if needing:
        raise _refusal(source, needing, f"the backend {backend.describe()}")
    new_components: dict[str, Any] = {}
    for name, entry in (data.get("components") or {}).items():
        cls = component_class(entry.get("type")) if isinstance(entry, dict) else None
        variant = backend.follow(cls, dict(entry.get("init_parameters") or {})) if cls is not None else None
        new_components[name] = variant if variant is not None else entry
    return {**data, "components": new_components}


__all__ = [
    "BACKEND_ENV",
    "apply_backend",
    "backend_from_dict",
    "backend_from_environment",
    "check_model_access",
    "component_class",
    "is_black_box",
    "load_backend",
    "request_concurrency",
    "resolve_backend",
    "weights_reason",
]
