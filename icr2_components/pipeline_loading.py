"""Loading YAML pipelines with this package on Haystack's deserialization allowlist (never ``unsafe``).

Every failure is a :class:`PipelineLoadError` whose message names the file and the cause, in one line: a YAML
syntax error gives the line and column; a component whose ``__init__`` refused its parameters gives the
component and the component's own message (e.g. a model path to train first); only a module refused by the
allowlist gets the text on how to trust another package.

Haystack's llama.cpp generators (``haystack_integrations.components.generators.llama_cpp``: ``LlamaCppChatGenerator``,
``LlamaCppGenerator``; on Haystack's default allowlist, as all of ``haystack_integrations`` is) take the path of a GGUF
file. A YAML may name the bundled one by its alias instead, ``model: smollm2-135m-instruct-gguf`` (or
``model_kwargs: {model_path: smollm2-135m-instruct-gguf}``), so that it holds no machine's path: the loader puts the
installed file's path in its place (:func:`icr2_components.models.resolver.resolve_gguf`) before the component is
built.

The technique pipelines ship inside the package and load by name from any folder (``load_pipeline("rap")``;
``icr2_components.resources.shipped_names("pipelines")`` lists them);
``icr2_components.technique_component`` wraps one as a Haystack ``SuperComponent`` for a pipeline of your own.

Plain Haystack, without this loader: Haystack refuses to import components outside its own modules unless they
are allowed, so pass this package's modules (and keep Haystack's ``unsafe`` off):

    >>> from haystack import Pipeline
    >>> from icr2_components.resources import shipped_file
    >>> pipeline = Pipeline.loads(shipped_file("pipelines", "vanilla_rag").read_text(),
    ...                           allowed_modules=["icr2_components.*"])

(or set ``HAYSTACK_DESERIALIZATION_ALLOWLIST="icr2_components.*"``). ``Pipeline.dumps()`` of a pipeline built
from these components loads back the same way. What this loader adds: one-line errors naming the file and the
component, a served reader refused beside a component that needs the weights, and the bundled GGUF alias in
llama.cpp generators.
"""

from __future__ import annotations

import os
import re
from typing import Any

import yaml
from haystack import Pipeline
from haystack.core.errors import DeserializationError, PipelineError
from haystack.core.serialization import DeserializationCallbacks

from icr2_components.backends.pipelines import apply_backend, check_model_access, given_backend
from icr2_components.errors import UserInputError
from icr2_components.models.resolver import BUNDLED_GGUF_FILES, resolve_gguf

ALLOWED_MODULES = ["icr2_components.*"]
LLAMA_CPP_MODULE = "haystack_integrations.components.generators.llama_cpp"

_COMPONENT = re.compile(r"Couldn't deserialize component '([^']+)'")


class PipelineLoadError(UserInputError):
    """A pipeline YAML could not be loaded; the message says which file and why."""


def load_pipeline(path: str | os.PathLike, extra_allowed_modules: list[str] | None = None,
                  backend: Any = None) -> Pipeline:
    """Load a technique pipeline, by shipped name or by path, allowing only Haystack's defaults, ``icr2_components``
    and any extras.

    Usage:
        >>> from icr2_components import load_pipeline
        >>> pipeline = load_pipeline("closed_book")                  # a shipped pipeline, from any folder
        >>> pipeline = load_pipeline("my_pipelines/closed_book.yaml")  # a file of your own
        >>> pipeline = load_pipeline("vanilla_rag", backend="llama_cpp_server")  # its reader on a served model

    :param path: A shipped pipeline's name (``icr2_components.resources.shipped_names("pipelines")``) or the path
        of a pipeline YAML; a path that exists wins over a name.
    :param extra_allowed_modules: Further module patterns Haystack may import components from.
    :param backend: None (the pipeline's own models), a ``Backend``, or a backend file's path or shipped name
        (``llama_cpp_server``): the model-using components then follow it, as in ``technique_component``.
    :returns: The Haystack pipeline, not yet warmed up.
    :raises FileNotFoundError: Neither a file nor a shipped name (the message lists the shipped names).
    :raises PipelineLoadError: The YAML or a component's parameters are wrong; the message names the file and why.
    :raises BackendError: ``backend`` is none of the above, or its file is wrong, or a component needs what the
        backend does not provide (model weights on a served model).
    """
    from icr2_components.resources.lookup import resolve_file

    if not isinstance(path, (str, os.PathLike)):
        raise PipelineLoadError(f"path must be a shipped pipeline's name or a pipeline YAML's path, got {path!r}.")
    path = resolve_file("pipelines", path)
    if not path.exists():
        raise FileNotFoundError(f"Pipeline file not found: {path}")
    if path.is_dir():
        raise PipelineLoadError(f"{path} is a folder; give a pipeline YAML in it or a shipped pipeline's name.")
    text, source = path.read_text(), str(path)
    chosen = given_backend(backend)
    if chosen is not None:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            data = None  # loads_pipeline names the syntax error, with its line and column
        if isinstance(data, dict):
            text = yaml.safe_dump(apply_backend(data, chosen, source), sort_keys=False)
            source = f"{path} on backend {chosen.describe()}"
    return loads_pipeline(text, source=source, extra_allowed_modules=extra_allowed_modules)


def describe_yaml_error(error: yaml.YAMLError) -> str:
    """``line 3, column 4: expected ',' or ']', but got '<scalar>' (while parsing a flow sequence)``, one line."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None)
    context = getattr(error, "context", None)
    if problem is None:
        return " ".join(str(error).split())
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + str(problem) + (f" ({context})" if context else "")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _bundled_gguf_alias(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() in BUNDLED_GGUF_FILES


def _resolve_bundled_gguf(component_name: str, component_class: type, init_params: dict) -> None:
    """Haystack's pre-init callback: a llama.cpp generator's bundled GGUF alias becomes the installed file's path."""
    if not (component_class.__module__ + ".").startswith(LLAMA_CPP_MODULE + "."):
        return
    if _bundled_gguf_alias(init_params.get("model")):
        init_params["model"] = resolve_gguf(init_params["model"])
    model_kwargs = init_params.get("model_kwargs")
    if isinstance(model_kwargs, dict) and _bundled_gguf_alias(model_kwargs.get("model_path")):
        init_params["model_kwargs"] = {**model_kwargs, "model_path": resolve_gguf(model_kwargs["model_path"])}


_CALLBACKS = DeserializationCallbacks(component_pre_init=_resolve_bundled_gguf)


def loads_pipeline(text: str, source: str = "<string>", extra_allowed_modules: list[str] | None = None) -> Pipeline:
    allowed = ALLOWED_MODULES + list(extra_allowed_modules or [])
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None  # Pipeline.loads reports the syntax error below, with its line and column
    if isinstance(data, dict):
        # a served (black-box) reader beside a component that needs the weights: refuse now, naming both
        check_model_access(data, source)
    try:
        return Pipeline.loads(text, callbacks=_CALLBACKS, allowed_modules=allowed)
    except DeserializationError as error:
        cause = error.__cause__
        if isinstance(cause, yaml.YAMLError):
            raise PipelineLoadError(
                f"{source} is not valid YAML: {describe_yaml_error(cause)}. Fix the syntax there."
            ) from error
        if str(error).startswith("Refusing to deserialize"):
            raise PipelineLoadError(
                f"{source}: {_one_line(error)} Only Haystack's own modules and {allowed} may be named in a pipeline; "
                "pass extra_allowed_modules (or set HAYSTACK_DESERIALIZATION_ALLOWLIST) to trust another package."
            ) from error
        match = _COMPONENT.search(str(error))
        if cause is not None and match:
            # a component's __init__ refused its parameters: its own message says what to do
            raise PipelineLoadError(f"{source}: component '{match.group(1)}': {_one_line(cause)}") from error
        raise PipelineLoadError(f"{source}: {_one_line(error)}") from error
    except PipelineError as error:
        # missing 'type', a component that cannot be imported, a bad connection
        detail = _one_line(error)
        if error.__cause__ is not None and "not imported" in detail:
            detail += f" ({type(error.__cause__).__name__}: {_one_line(error.__cause__)})"
        raise PipelineLoadError(f"{source}: {detail}") from error
    except (ValueError, TypeError, AttributeError, KeyError) as error:
        # a connection naming an unknown component (ValueError), a top level that is not a mapping, ...
        raise PipelineLoadError(
            f"{source} is not a valid pipeline: {type(error).__name__}: {_one_line(error)}"
        ) from error
