"""A hayhooks pipeline wrapper around a pipeline loaded with OUR loader (allowlist, never unsafe)."""

from __future__ import annotations

import inspect
import threading
from typing import Any

import numpy
from hayhooks.server.utils.base_pipeline_wrapper import BasePipelineWrapper
from haystack import Document
from haystack.dataclasses import ChatMessage

from icr2_components.pipeline_spec import PipelineSpec
from icr2_components.serving.refusals import refusal_for
from icr2_components.serving.request_model import DocumentIn
from icr2_components.serving.response_model import build_result_model


def to_json(value: Any) -> Any:
    """Pipeline outputs as JSON: a chat message -> its text, a document -> id/content/score/meta, numpy -> Python."""
    if isinstance(value, ChatMessage):
        return value.text
    if isinstance(value, Document):
        return {"id": value.id, "content": value.content, "score": value.score, "meta": to_json(value.meta)}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, numpy.generic | numpy.ndarray):  # a float32 score is a number, not its repr
        return to_json(value.tolist())
    if hasattr(value, "to_dict"):
        return to_json(value.to_dict())
    return repr(value)  # kept visible rather than dropped


class DeclaredPipelineWrapper(BasePipelineWrapper):
    """Serves one ``pipelines/<name>.yaml`` through hayhooks at ``POST /<name>/run``.

    Hayhooks' own ``YAMLPipelineWrapper`` loads YAML with a plain ``Pipeline.loads``, which refuses our modules;
    this wrapper takes the pipeline from ``PipelineSpec`` (our ``load_pipeline``: the ``icr2_components.*``
    allowlist, never unsafe), maps each declared input to its sockets and returns the declared outputs as JSON,
    shaped as ``result_model`` (``build_result_model``: typed from the output sockets), which hayhooks makes the
    ``result`` of the route's 200 schema and checks every answer against.

    Usage example:
    ```python
    from icr2_components.pipeline_spec import PipelineSpec
    from icr2_components.serving import DeclaredPipelineWrapper

    wrapper = DeclaredPipelineWrapper(PipelineSpec.from_file("pipelines/closed_book.yaml"), max_new_tokens=8)
    wrapper.setup()
    print(wrapper.run_api(query="What is the capital of France?")["replies"][0])
    ```
    """

    def __init__(self, spec: PipelineSpec, max_new_tokens: int | None = None, concurrency: int = 1) -> None:
        """
        :param spec: the pipeline, loaded and checked by `PipelineSpec.from_file`.
        :param max_new_tokens: override the answer budget of every component with a `max_new_tokens` input (None: the YAML's).
        :param concurrency: pipeline runs at once; more requests wait their turn (1 suits a CPU reader).
        """
        super().__init__()
        if not isinstance(spec, PipelineSpec):
            raise TypeError("spec must be a PipelineSpec; build it with PipelineSpec.from_file('pipelines/x.yaml').")
        if max_new_tokens is not None and max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1 or None, got {max_new_tokens}.")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}.")
        self.spec = spec
        self.max_new_tokens = max_new_tokens
        self.concurrency = concurrency
        self._slots = threading.BoundedSemaphore(concurrency)
        self._is_run_api_implemented = True
        parameters = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Any)
                      for name in spec.inputs]
        # the declared outputs, typed from their sockets: hayhooks makes it the `result` of the 200 schema and
        # validates every answer against it (an answer that does not fit is a 500, never an undocumented 200)
        self.result_model = build_result_model(spec)
        run_api = type(self).run_api
        bound = run_api.__get__(self, type(self))
        # hayhooks reads the signature of run_api to name the request fields; ours come from the declared inputs
        self.run_api = _with_signature(bound, parameters, self.result_model)

    def setup(self) -> None:
        """Load every model now, so that the first request does not pay for it."""
        if self.pipeline is None:
            self.pipeline = self.spec.pipeline(controlled=False)
            self.pipeline.warm_up()

    def run_api(self, **inputs: Any) -> dict:
        """Answer one request: the declared inputs in, the declared outputs (JSON) out.

        A failure the request caused (a prompt over the reader's context) is raised as ``RequestRefused`` (4xx);
        any other exception propagates and is answered 500.
        """
        self.setup()
        unknown = set(inputs) - set(self.spec.inputs)
        if unknown:
            raise ValueError(f"unknown inputs {sorted(unknown)}; declared: {sorted(self.spec.inputs)}")
        data: dict[str, dict[str, Any]] = {}
        for name, value in inputs.items():
            if value is None:
                continue
            if isinstance(value, list) and value and isinstance(value[0], dict | DocumentIn):
                value = [(v if isinstance(v, DocumentIn) else DocumentIn(**v)).to_document() for v in value]
            for target in self.spec.inputs[name]:
                component, socket = target.split(".", 1)
                data.setdefault(component, {})[socket] = value
        if self.max_new_tokens:
            # every component with a max_new_tokens input gets the server's cap, whatever its class (as in compare)
            for component_name, sockets in self.pipeline.inputs(include_components_with_connected_inputs=True).items():
                if "max_new_tokens" in sockets:
                    data.setdefault(component_name, {})["max_new_tokens"] = self.max_new_tokens
        outputs_from = {path.split(".", 1)[0] for path in self.spec.outputs.values()}
        with self._slots:
            try:
                result = self.pipeline.run(data, include_outputs_from=outputs_from)
            except Exception as error:
                refusal = refusal_for(error)
                if refusal is None:
                    raise
                raise refusal from error
        response = {}
        for name, path in self.spec.outputs.items():
            component, socket = path.split(".", 1)
            response[name] = to_json(result.get(component, {}).get(socket))
        return response


def _with_signature(bound, parameters, result_model):
    def run_api(**inputs: Any) -> dict:
        return bound(**inputs)

    run_api.__doc__ = bound.__doc__
    run_api.__signature__ = inspect.Signature(parameters, return_annotation=result_model)
    return run_api


__all__ = ["DeclaredPipelineWrapper", "to_json"]
