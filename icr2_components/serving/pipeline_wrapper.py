"""A hayhooks pipeline wrapper around a pipeline loaded with OUR loader (allowlist, never unsafe)."""

from __future__ import annotations

import contextvars
import inspect
import logging
import queue
import threading
from collections.abc import Generator, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import networkx
import numpy
from hayhooks import BasePipelineWrapper
from haystack import Document, SuperComponent
from haystack.dataclasses import ChatMessage, StreamingChunk

from icr2_components.pipeline_spec import PipelineSpec, nested_outputs, setting_inputs
from icr2_components.serving.observation import note_answer, note_pipeline
from icr2_components.serving.openai_models import (
    ChatRequestRefused,
    answer_budget,
    query_from_messages,
    refuse_unhonoured_fields,
)
from icr2_components.serving.refusals import refusal_for
from icr2_components.serving.request_model import DocumentIn
from icr2_components.serving.response_model import build_result_model

logger = logging.getLogger(__name__)
_STREAM_EVENTS: ContextVar[queue.Queue] = ContextVar("icr2_serve_stream_events")


def stream_to_request(chunk: StreamingChunk) -> None:
    """The ``streaming_callback`` the streaming readers get: passes a chunk's text to the request being answered
    in this thread. Module-level, as hayhooks' own, because Haystack serialises run inputs into its snapshots."""
    if chunk.content:
        _STREAM_EVENTS.get().put(chunk.content)


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


@dataclass
class ChatAnswer:
    """The pipeline's answer as a chat completion: the first reply's text, why it ended, the reader's token
    counts (None when its reply meta has none) and the other declared outputs as JSON."""

    text: str
    finish_reason: str = "stop"
    usage: dict[str, int] | None = None
    outputs: dict[str, Any] = field(default_factory=dict)


class _Finished:
    def __init__(self, result: dict | None = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error


class DeclaredPipelineWrapper(BasePipelineWrapper):
    """Serves one technique pipeline at ``POST /<name>/run``: in ``icr2 serve``'s app, or deployed by hayhooks.

    Hayhooks' own ``YAMLPipelineWrapper`` loads YAML with a plain ``Pipeline.loads``, which refuses our modules;
    this wrapper takes the pipeline from ``PipelineSpec`` (our ``load_pipeline``: the ``icr2_components.*``
    allowlist, never unsafe), runs it as the spec's SuperComponent over the declared inputs and outputs
    (``PipelineSpec.component``) and returns the declared outputs as JSON,
    shaped as ``result_model`` (``build_result_model``: typed from the output sockets), which the server makes the
    ``result`` of the route's 200 schema and checks every answer against.

    It also answers as an OpenAI chat model, hayhooks' way (``run_chat_completion``: the last user message is
    the query; a string, or a generator of ``StreamingChunk`` when the body asks to stream), and through
    ``answer`` / ``stream_answer``, which ``icr2 serve``'s ``/v1/chat/completions`` uses (``openai_routes``).
    A stream carries the reader's tokens as they are generated when the component that writes ``replies`` (or,
    through a joiner, the last ones before it) takes a ``streaming_callback``; else the whole answer at the end.

    Usage example:
    ```python
    from icr2_components.pipeline_spec import PipelineSpec
    from icr2_components.serving import DeclaredPipelineWrapper

    wrapper = DeclaredPipelineWrapper(PipelineSpec.from_file("closed_book"), max_new_tokens=8)
    wrapper.setup()
    print(wrapper.run_api(query="What is the capital of France?")["replies"][0])
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    print(wrapper.run_chat_completion("closed_book", messages, {}))
    for chunk in wrapper.run_chat_completion("closed_book", messages, {"stream": True}):
        print(chunk.content, end="")
    ```
    """

    skip_mcp = True  # the server mounts no MCP or A2A face (hayhooks would list a chat-capable wrapper)
    skip_a2a = True

    def __init__(self, spec: PipelineSpec, max_new_tokens: int | None = None, concurrency: int = 1) -> None:
        """
        :param spec: the pipeline, loaded and checked by `PipelineSpec.from_file`.
        :param max_new_tokens: override the answer budget of every component with a `max_new_tokens` input (None: the
            YAML's).
        :param concurrency: pipeline runs at once; more requests wait their turn (1 suits a CPU reader).
        """
        super().__init__()
        if not isinstance(spec, PipelineSpec):
            raise TypeError("spec must be a PipelineSpec; build it with PipelineSpec.from_file('closed_book') "
                            "(a shipped name or a YAML path).")
        if max_new_tokens is not None and max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1 or None, got {max_new_tokens}.")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}.")
        self.spec = spec
        self.max_new_tokens = max_new_tokens
        self.concurrency = concurrency
        self._slots = threading.BoundedSemaphore(concurrency)
        self._setup_lock = threading.Lock()
        self.streaming_components: list[str] = []
        self._wrapped: SuperComponent  # set by setup: the spec's SuperComponent, warmed up
        parameters = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Any)
                      for name in spec.inputs]
        # the declared outputs, typed from their sockets: the server makes it the `result` of the 200 schema and
        # validates every answer against it (an answer that does not fit is a 500, never an undocumented 200)
        self.result_model = build_result_model(spec)
        run_api = type(self).run_api
        bound = run_api.__get__(self, type(self))
        # hayhooks reads the signature of run_api to name the request fields; ours come from the declared inputs
        self.run_api = _with_signature(bound, parameters, self.result_model)

    def setup(self) -> None:
        """Load every model now, so that the first request does not pay for it. Thread-safe: a request that
        arrives while the server loads the pipeline in the background waits for that load (never a second one)."""
        if self.pipeline is not None:
            return
        with self._setup_lock:
            if self.pipeline is None:
                wrapped = self.spec.component(controlled=False)
                wrapped.warm_up()
                self.streaming_components = reply_streamers(wrapped.pipeline, self.spec.outputs["replies"])
                self._wrapped = wrapped
                self.pipeline = wrapped.pipeline  # only once warmed up: no request runs a half-loaded pipeline

    def run_api(self, **inputs: Any) -> dict:
        """Answer one request: the declared inputs in, the declared outputs (JSON) out.

        A failure the request caused (a prompt over the reader's context) is raised as ``RequestRefused`` (4xx);
        any other exception propagates and is answered 500.
        """
        result = self._run(self._component_inputs(inputs))
        return {name: to_json(_output(result, path)) for name, path in self.spec.outputs.items()}

    def _component_inputs(self, inputs: dict[str, Any], max_new_tokens: int | None = None) -> dict[str, Any]:
        """The SuperComponent inputs (``PipelineSpec.component``) for the declared ``inputs``, with the answer
        budgets: ``max_new_tokens`` (a request's) lowers each component's budget (the server's ``max_new_tokens``,
        else its own), never raises it."""
        self.setup()
        note_pipeline(self.spec.name, inputs.get("query"))  # for the request's metrics, trace and logs
        unknown = set(inputs) - set(self.spec.inputs)
        if unknown:
            raise ValueError(f"unknown inputs {sorted(unknown)}; declared: {sorted(self.spec.inputs)}")
        given: dict[str, Any] = {}
        for name, value in inputs.items():
            if value is None:
                continue
            if isinstance(value, list) and value and isinstance(value[0], dict | DocumentIn):
                value = [(v if isinstance(v, DocumentIn) else DocumentIn(**v)).to_document() for v in value]
            given[name] = value
        if self.max_new_tokens or max_new_tokens:
            # every component with a max_new_tokens input gets the server's cap, whatever its class (as in compare)
            for component_name, input_name in setting_inputs(self._wrapped, "max_new_tokens").items():
                cap = self.max_new_tokens or getattr(self.pipeline.get_component(component_name),
                                                     "max_new_tokens", None)
                budget = min(max_new_tokens, cap) if max_new_tokens and isinstance(cap, int) else (
                    max_new_tokens or cap)
                given[input_name] = budget
        return given

    def _run(self, given: dict[str, Any]) -> dict:
        """Run the pipeline in one of the ``concurrency`` slots; the outputs as ``{component: {socket: value}}``.
        An input-caused failure is a ``RequestRefused``."""
        with self._slots:
            try:
                return nested_outputs(self._wrapped, self._wrapped.run(**given))
            except Exception as error:
                refusal = refusal_for(error)
                if refusal is None:
                    raise
                raise refusal from error

    def _chat_answer(self, result: dict) -> ChatAnswer:
        replies = _output(result, self.spec.outputs["replies"])
        if not replies:
            raise RuntimeError(f"the pipeline produced no reply at {self.spec.outputs['replies']} for this request")
        reply = replies[0] if isinstance(replies, list | tuple) else replies
        meta = reply.meta if isinstance(reply, ChatMessage) else {}
        text = reply.text if isinstance(reply, ChatMessage) else to_json(reply)
        if not isinstance(text, str):
            raise TypeError(f"the pipeline's first reply is not text: {text!r}")
        usage = None
        if isinstance(meta.get("prompt_tokens"), int) and isinstance(meta.get("completion_tokens"), int):
            usage = {"prompt_tokens": meta["prompt_tokens"], "completion_tokens": meta["completion_tokens"],
                     "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"]}
        finish = meta.get("finish_reason") if meta.get("finish_reason") in ("stop", "length") else "stop"
        outputs = {name: to_json(_output(result, path)) for name, path in self.spec.outputs.items()
                   if name != "replies"}
        note_answer(text, outputs)
        return ChatAnswer(text=text, finish_reason=finish, usage=usage, outputs=outputs)

    def answer(self, inputs: dict[str, Any], max_new_tokens: int | None = None) -> ChatAnswer:
        """The chat answer to the declared ``inputs`` (``query``: the last user message's text)."""
        return self._chat_answer(self._run(self._component_inputs(inputs, max_new_tokens)))

    def stream_answer(self, inputs: dict[str, Any], max_new_tokens: int | None = None) -> Iterator[str | ChatAnswer]:
        """The answer as it is generated: text pieces (the streaming readers' tokens), then the ``ChatAnswer``,
        whose text the pieces concatenate to. The pipeline runs in its own thread (and slot); a failure is raised
        from the iterator, a refusal as ``RequestRefused``. A pipeline with no streaming reader yields the whole
        text as one piece."""
        data = self._component_inputs(inputs, max_new_tokens)
        events: queue.Queue = queue.Queue()
        streaming_inputs = setting_inputs(self._wrapped, "streaming_callback")
        for name in self.streaming_components:
            if name in streaming_inputs:
                data[streaming_inputs[name]] = stream_to_request

        def work() -> None:
            _STREAM_EVENTS.set(events)  # this thread's: the pipeline runs its components here
            try:
                events.put(_Finished(result=self._run(data)))
            except BaseException as error:  # handed to the consumer, which raises it
                events.put(_Finished(error=error))

        # the request's context goes with the run (its observation and trace span: serving.observation)
        threading.Thread(target=contextvars.copy_context().run, args=(work,), name=f"icr2-serve-{self.spec.name}",
                         daemon=True).start()

        def pieces() -> Generator[str | ChatAnswer, None, None]:
            streamed = ""
            while True:
                event = events.get()
                if isinstance(event, str):
                    streamed += event
                    yield event
                    continue
                if event.error is not None:
                    raise event.error
                answer = self._chat_answer(event.result)
                if answer.text != streamed:
                    if answer.text.startswith(streamed):
                        yield answer.text[len(streamed):]   # no streaming reader, or a step after it added text
                    else:
                        logger.warning("the streamed text %r is not the start of the answer %r", streamed, answer.text)
                yield answer
                return

        return pieces()

    def run_chat_completion(self, model: str, messages: list[dict], body: dict) -> str | Generator:
        """hayhooks' OpenAI hook: the last user message is the query (the other declared inputs from ``body``);
        the answer text, or with ``body["stream"]`` a generator of ``StreamingChunk`` (the last one carries the
        ``finish_reason``). As on ``icr2 serve``'s own chat route, a field the pipeline cannot honour
        (``tools``, ``response_format``, ``logprobs``...) and an answer budget that is not a whole number
        (``max_tokens: true``) are refused (``ChatRequestRefused``), not ignored."""
        if model != self.spec.name:
            raise ChatRequestRefused(404, "model_not_found", f"model {model!r} is not served; this server serves "
                                     f"{self.spec.name!r}", param="model")
        refuse_unhonoured_fields(body)
        budget = answer_budget(body)
        _, query = query_from_messages(messages)
        inputs = {"query": query, **{name: body[name] for name in self.spec.inputs if name != "query" and name in body}}
        if not body.get("stream"):
            return self.answer(inputs, budget).text

        def chunks() -> Generator[StreamingChunk, None, None]:
            for event in self.stream_answer(inputs, budget):
                if isinstance(event, ChatAnswer):
                    yield StreamingChunk(content="", finish_reason=event.finish_reason,
                                         meta={"usage": event.usage} if event.usage else {})
                else:
                    yield StreamingChunk(content=event)

        return chunks()


def _output(result: dict, path: str) -> Any:
    component, socket = path.split(".", 1)
    return result.get(component, {}).get(socket)


def reply_streamers(pipeline, replies_path: str) -> list[str]:
    """The components whose ``streaming_callback`` streams the answer: those with a ``streaming_callback`` input
    (Haystack's ``Pipeline.inputs``) among the ``replies`` component and its ancestors, less any that feeds another
    (a judge before the answering reader); two branches' readers behind a joiner both stream (one runs)."""
    target = replies_path.split(".", 1)[0]
    upstream = networkx.ancestors(pipeline.graph, target) | {target}
    sockets = pipeline.inputs(include_components_with_connected_inputs=True)
    capable = {name for name in upstream if "streaming_callback" in sockets.get(name, {})}
    return sorted(name for name in capable if not networkx.descendants(pipeline.graph, name) & capable)

def _with_signature(bound, parameters, result_model):
    def run_api(**inputs: Any) -> dict:
        return bound(**inputs)

    run_api.__doc__ = bound.__doc__
    run_api.__signature__ = inspect.Signature(parameters, return_annotation=result_model)
    return run_api


__all__ = ["ChatAnswer", "DeclaredPipelineWrapper", "reply_streamers", "to_json"]
