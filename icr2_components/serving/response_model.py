"""The response bodies ``icr2 serve`` answers, as Pydantic models, so that ``/openapi.json`` states them exactly.

* 200: ``{"result": {<declared output>: ...}}``, one key per declared ``outputs`` entry, each typed from the
  socket it reads, converted the way ``to_json`` converts it: a chat message is its text, a document is
  ``{"id", "content", "score", "meta"}``, lists and dicts stay lists and objects. An output is nullable only
  when a branching component (two or more connected output sockets, e.g. a retrieval gate) sits on its way:
  then the branch may not run and the output is ``null``; on a linear pipeline every output is always there.
* every error: ``{"error": <kind>, "reason": <text>, "status": <code>}``; one model per status, whose ``error``
  is the list of kinds that status can carry.
"""

from __future__ import annotations

from typing import Any, Literal, Union, get_args, get_origin

import networkx
from haystack import Document, Pipeline
from haystack.dataclasses import ChatMessage
from pydantic import BaseModel, ConfigDict, Field, create_model

from icr2_components.pipeline_spec import PipelineSpec

_JSON_SCALARS = (str, int, float, bool)


class DocumentOut(BaseModel):
    """A passage in a response: the Haystack document's id, text, retrieval score and metadata."""

    model_config = ConfigDict(extra="forbid")
    id: str
    content: str | None = Field(..., description="the passage text (null for a document without text)")
    score: float | None = Field(..., description="the retrieval or ranking score (null when none was set)")
    meta: dict[str, Any] = Field(..., description="the document's metadata (title, wikipedia_id, ...)")


def json_annotation(annotation: Any) -> Any:
    """The JSON shape ``to_json`` makes of a value of the socket type ``annotation``."""
    if annotation is ChatMessage:
        return str
    if annotation is Document:
        return DocumentOut
    if annotation in _JSON_SCALARS:
        return annotation
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (list, tuple) or annotation in (list, tuple):
        item = args[0] if args and (origin is list or (len(args) == 2 and args[1] is Ellipsis)) else Any
        return list[json_annotation(item)]
    if origin is dict or annotation is dict:
        return dict[str, json_annotation(args[1]) if len(args) == 2 else Any]
    if origin is Union or type(annotation).__name__ == "UnionType":
        return Union[tuple(json_annotation(a) if a is not type(None) else type(None) for a in args)]  # noqa: UP007
    return Any  # anything else is kept visible by to_json: its to_dict() or its repr


def branching_components(pipeline: Pipeline) -> set[str]:
    """Components with two or more connected output sockets: only one of their branches may run."""
    branching = set()
    for name, data in pipeline.graph.nodes(data=True):
        connected = [socket for socket in data["output_sockets"].values() if socket.receivers]
        if len(connected) >= 2:
            branching.add(name)
    return branching


def build_result_model(spec: PipelineSpec, pipeline: Pipeline | None = None) -> type[BaseModel]:
    """The model of ``result`` in a 200 answer: one required key per declared output, typed from its socket."""
    pipeline = pipeline if pipeline is not None else spec.pipeline(controlled=False)
    branching = branching_components(pipeline)
    sockets = pipeline.outputs(include_components_with_connected_outputs=True)  # every output socket, typed
    fields: dict[str, Any] = {}
    for name, path in spec.outputs.items():
        component, socket = path.split(".", 1)
        annotation = json_annotation(sockets[component][socket]["type"])
        description = f"{path}"
        if branching & (networkx.ancestors(pipeline.graph, component) | {component}):
            annotation = annotation | None if annotation is not Any else Any
            description += " (null when the branch that produces it did not run for this request)"
        fields[name] = (annotation, Field(..., description=description))
    model_name = "".join(part.capitalize() for part in spec.name.split("_")) + "Result"
    return create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)


def error_model(name: str, status: int, kinds: dict[str, str]) -> type[BaseModel]:
    """The error body of one status: ``error`` is one of ``kinds`` (kind -> when it is answered)."""
    meaning = "; ".join(f"{kind}: {when}" for kind, when in kinds.items())
    return create_model(
        name,
        __config__=ConfigDict(extra="forbid"),
        error=(Literal[tuple(kinds)], Field(..., description=meaning)),
        reason=(str, Field(..., description="what was wrong and, where it applies, the limit or how to fix it")),
        status=(Literal[status], Field(..., description="the HTTP status, repeated")),
    )


__all__ = ["DocumentOut", "branching_components", "build_result_model", "error_model", "json_annotation"]
