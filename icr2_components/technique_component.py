"""A technique pipeline as one Haystack ``SuperComponent`` inside a user's own pipeline.

A technique YAML declares the inputs and outputs a request uses (``inputs: {query: [retriever.query, ...]}``,
``outputs: {replies: reader.replies}``); Haystack's ``SuperComponent`` maps them onto the wrapped pipeline through
its public ``Pipeline.inputs()``/``outputs()``.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import yaml
from haystack import SuperComponent

from icr2_components.pipeline_loading import loads_pipeline


def technique_component(name_or_path: str | os.PathLike, backend: Any = None) -> SuperComponent:
    """A technique pipeline as one Haystack component: a ``SuperComponent`` whose inputs and outputs are the
    YAML's declared ``inputs`` (``query``, and ``documents`` for a pipeline that takes passages) and ``outputs``
    (``replies``, and what else it declares: ``documents``, a gate's ``decision``, ...). A YAML that declares
    neither (the corpus-in-context benchmark pipelines) gets Haystack's default inputs (every open input socket,
    by its name) and every output socket nothing reads, by its name (``<component>_<socket>`` where two components
    share a socket name, e.g. ``corpus_report``).

    Usage:
        >>> from haystack import Pipeline
        >>> from icr2_components import technique_component
        >>> rag = technique_component("vanilla_rag")
        >>> pipeline = Pipeline()
        >>> pipeline.add_component("rag", rag)
        >>> result = pipeline.run({"rag": {"query": "who wrote the iliad?"}})
        >>> result["rag"]["replies"][0].text

    :param name_or_path: A shipped pipeline's name (``vanilla_rag``, ``adaptive_rag``, ``rap``, ...) or the path of
        a pipeline YAML that declares ``inputs`` and ``outputs``.
    :param backend: None (the pipeline's own models), a ``Backend``, or a backend file's path or shipped name
        (``llama_cpp_server``): the model-using components then follow it (a served reader).
    :returns: The ``SuperComponent``; ``warm_up()`` loads its models (a pipeline it joins warms it up itself).
    :raises FileNotFoundError: Neither a file nor a shipped pipeline name (the message lists the names).
    :raises PipelineLoadError: The YAML or a component's parameters are wrong.
    :raises ValueError: Malformed ``inputs``/``outputs``, or two outputs read the same socket.
    """
    from icr2_components.backends.pipelines import apply_backend, given_backend
    from icr2_components.pipeline_spec import PipelineSpec
    from icr2_components.resources.lookup import resolve_file

    backend = given_backend(backend)
    path = resolve_file("pipelines", name_or_path)
    if not path.exists():
        raise FileNotFoundError(f"Pipeline file not found: {path}")
    data = yaml.safe_load(path.read_text())
    if isinstance(data, dict) and "inputs" not in data and "outputs" not in data:
        if backend is not None:
            data = apply_backend(data, backend, str(path))
        pipeline = loads_pipeline(yaml.safe_dump(data, sort_keys=False), source=str(path))
        leaves = pipeline.outputs()
        counts = Counter(socket for sockets in leaves.values() for socket in sockets)
        return SuperComponent(pipeline=pipeline, output_mapping={
            f"{component}.{socket}": socket if counts[socket] == 1 else f"{component}_{socket}"
            for component, sockets in leaves.items() for socket in sockets
        })
    spec = PipelineSpec.from_file(os.fspath(path), backend=backend)
    input_mapping, output_mapping = spec.declared_mappings()
    return SuperComponent(pipeline=spec.pipeline(controlled=False), input_mapping=input_mapping,
                          output_mapping=output_mapping)
