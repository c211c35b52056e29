"""The request body a served pipeline accepts, built from the pipeline's declared ``inputs``."""

from __future__ import annotations

from typing import Annotated, Any, get_args, get_origin

from haystack import Document, Pipeline
from pydantic import (
    AfterValidator,
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    create_model,
)

from icr2_components.pipeline_spec import PipelineSpec, PipelineSpecError
from icr2_components.text.blank import is_blank

DEFAULT_MAX_QUERY_CHARS = 2000
_JSON_SCALARS = (str, int, float, bool)
# a JSON value is taken as the socket's type only when it is that type: `true` is not the number 1, "3" not 3, and
# a float is finite (a whole number still fills a float socket, as JSON writes 2.0 as 2)
STRICT_JSON_TYPES: dict[type, Any] = {
    str: Annotated[str, Strict()],
    int: Annotated[int, Strict()],
    float: Annotated[float, Strict(), AllowInfNan(False)],
    bool: Annotated[bool, Strict()],
}


class DocumentIn(BaseModel):
    """A passage sent in a request (the oracle's gold passages): ``content`` and optional ``meta`` / ``id``."""

    model_config = ConfigDict(extra="forbid")
    content: Annotated[str, StringConstraints(min_length=1)]
    meta: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None

    def to_document(self) -> Document:
        if self.id:
            return Document(id=self.id, content=self.content, meta=dict(self.meta))
        return Document(content=self.content, meta=dict(self.meta))


def _shows_text(query: str) -> str:
    """A query of white space or invisible characters only (zero-width spaces...) asks nothing: refused (422)."""
    if is_blank(query):
        raise ValueError("the query shows no text: it is white space or invisible characters only (a zero-width "
                         "space...)")
    return query


def _socket_type(pipeline: Pipeline, target: str) -> Any:
    component, socket = target.split(".", 1)
    return pipeline.inputs()[component][socket]["type"]


def _is_document_list(annotation: Any) -> bool:
    return get_origin(annotation) is list and get_args(annotation) and get_args(annotation)[0] is Document


def _json_type(annotation: Any) -> Any | None:
    """The strict request type of a socket a JSON value can carry (scalars, lists of scalars), else None."""
    if annotation in _JSON_SCALARS:
        return STRICT_JSON_TYPES[annotation]
    if get_origin(annotation) is list and get_args(annotation) and get_args(annotation)[0] in _JSON_SCALARS:
        return list[STRICT_JSON_TYPES[get_args(annotation)[0]]]
    return None


def build_request_model(spec: PipelineSpec, max_query_chars: int = DEFAULT_MAX_QUERY_CHARS) -> type[BaseModel]:
    """One field per declared input; unknown fields are refused (422), ``query`` is a non-empty bounded string.

    ``documents``-typed inputs take ``[{"content": ..., "meta": {...}}]``; other inputs take the JSON type of
    the socket they feed, strictly (``STRICT_JSON_TYPES``: no boolean for a number, no string for a number, no
    NaN or infinity). An input whose socket type JSON cannot carry is an error at start-up, not at request.
    """
    if max_query_chars < 1:
        raise ValueError(f"max_query_chars must be >= 1, got {max_query_chars}.")
    pipeline = spec.pipeline(controlled=False)
    fields: dict[str, Any] = {}
    for name, targets in spec.inputs.items():
        annotation = _socket_type(pipeline, targets[0])
        if name == "query":
            fields[name] = (Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                                             max_length=max_query_chars), AfterValidator(_shows_text)],
                            Field(..., description=f"the question, 1 to {max_query_chars} characters"))
        elif _is_document_list(annotation):
            fields[name] = (list[DocumentIn], Field(..., min_length=1, description="passages: content and meta"))
        elif (json_type := _json_type(annotation)) is not None:
            fields[name] = (json_type, Field(..., description=f"feeds {', '.join(targets)}"))
        else:
            raise PipelineSpecError(
                f"{spec.path}: input {name!r} feeds {targets[0]} of type {annotation!r}, which a JSON request cannot "
                "carry; serve a pipeline whose declared inputs are strings, numbers, booleans, lists of them, or "
                "documents."
            )
    model_name = "".join(part.capitalize() for part in spec.name.split("_")) + "Request"
    return create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)


__all__ = ["DEFAULT_MAX_QUERY_CHARS", "STRICT_JSON_TYPES", "DocumentIn", "build_request_model"]
