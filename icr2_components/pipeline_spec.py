"""A pipeline YAML as ``icr2 compare`` and ``icr2 serve`` see it: declared inputs/outputs, hash, context entry.

A library pipeline declares, beside Haystack's ``components``/``connections``, the top-level ``inputs`` and
``outputs`` maps hayhooks reads (``name: component.socket`` or a list of targets). ``metadata.context_input``
names the socket that receives the passages; under a controlled context type (gold, conflicting, irrelevant)
compare removes the components that feed it (the retriever, or retrievers and corpus builder) and passes the
given passages there, so that only the context-utilisation stage differs (as CUB does).

The declared ``inputs``/``outputs`` are Haystack ``SuperComponent`` mappings and are run as one: compare and serve
call the SuperComponent of :meth:`PipelineSpec.component` (the declared mappings, the context entry, a setting input
per reader budget and token stream, and the outputs a record reads), and ``technique_component`` wraps the same
declared mappings for a user's pipeline, so an input or output means one thing everywhere.

Internal to compare and serve (and the experiments run through compare), not part of the package's API: a user
loads a pipeline as a Haystack ``Pipeline`` with :func:`~icr2_components.pipeline_loading.load_pipeline` and as a
component with :func:`~icr2_components.technique_component.technique_component`.
"""

from __future__ import annotations

import copy
import hashlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from haystack import Document, Pipeline, SuperComponent
from haystack.core.super_component.super_component import InvalidMappingTypeError, InvalidMappingValueError
from haystack.dataclasses import ChatMessage

from icr2_components.backends import Backend
from icr2_components.backends.pipelines import apply_backend
from icr2_components.errors import ComponentLoadError
from icr2_components.pipeline_loading import PipelineLoadError, loads_pipeline
from icr2_components.resources.lookup import is_shipped_name, resolve_file
from icr2_components.stores import retrieval_version
from icr2_components.stores.index_switch import DEFAULT_INDEX_CONFIG, apply_index_switch, index_switch

_LOADING = threading.RLock()


class PipelineSpecError(ValueError):
    """A pipeline YAML cannot be compared or served; the message says what to add."""


def _targets(value: Any) -> list[str]:
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, str) and "." in v]


def parse_declared_io(data: dict, source: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The declared ``inputs`` (name -> targets) and ``outputs`` (name -> path); raise when absent or malformed."""
    inputs, outputs = data.get("inputs"), data.get("outputs")
    if not isinstance(inputs, dict) or not inputs:
        raise PipelineSpecError(
            f"{source} declares no `inputs`. Add a top-level map such as `inputs: {{query: [retriever.query, "
            "prompt.query]}` naming the sockets each request field feeds (hayhooks' YAML convention)."
        )
    if not isinstance(outputs, dict) or not outputs:
        raise PipelineSpecError(f"{source} declares no `outputs`. Add e.g. `outputs: {{replies: reader.replies}}`.")
    parsed_inputs = {}
    for name, value in inputs.items():
        targets = _targets(value)
        if not targets:
            raise PipelineSpecError(f"{source}: input {name!r} must name `component.socket` targets, got {value!r}.")
        parsed_inputs[str(name)] = targets
    parsed_outputs = {}
    for name, value in outputs.items():
        targets = _targets(value)
        if len(targets) != 1:
            raise PipelineSpecError(f"{source}: output {name!r} must name one `component.socket`, got {value!r}.")
        parsed_outputs[str(name)] = targets[0]
    if "query" not in parsed_inputs:
        raise PipelineSpecError(f"{source}: compare and serve send the question as input `query`; declare it.")
    if "replies" not in parsed_outputs:
        raise PipelineSpecError(f"{source}: declare the reader's answer as output `replies` (e.g. reader.replies).")
    return parsed_inputs, parsed_outputs


# Run-time settings a caller gives one component (compare's answer budget, serve's per-reader budget and token
# stream): each open socket of these names is a SuperComponent input of its own, ``<component>_<socket>``.
SETTING_SOCKETS = ("max_new_tokens", "streaming_callback")
# The input that feeds the context entry its passages where no declared input does (a controlled context type).
CONTEXT_INPUT = "context_documents"


def setting_input(component: str, socket: str) -> str:
    """The SuperComponent input through which a caller sets ``component``'s run-time ``socket``."""
    return f"{component}_{socket}"


def setting_inputs(wrapped: SuperComponent, socket: str) -> dict[str, str]:
    """``{component: input name}`` of the setting inputs (``SETTING_SOCKETS``) for ``socket`` of ``wrapped``."""
    found = {}
    for name, targets in wrapped.input_mapping.items():
        if len(targets) == 1 and targets[0].endswith(f".{socket}"):
            component = targets[0].split(".", 1)[0]
            if name == setting_input(component, socket):
                found[component] = name
    return found


def nested_outputs(wrapped: SuperComponent, outputs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A SuperComponent's outputs as the wrapped pipeline's ``{component: {socket: value}}`` (through its output
    mapping); the sockets of components that did not run (a branch not taken) are absent."""
    nested: dict[str, dict[str, Any]] = {}
    for path, name in wrapped.output_mapping.items():
        if name in outputs:
            component, socket = path.split(".", 1)
            nested.setdefault(component, {})[socket] = outputs[name]
    return nested


def file_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# What decides a pipeline's answers. Comments and descriptive metadata (baseline, differs_in, technique) are left
# out, so documenting a pipeline does not throw away `icr2 compare`'s cached answers for it.
BEHAVIOUR_KEYS = ("components", "connections", "inputs", "outputs")
# Init parameters that change how fast a component answers, not what: left out of the hash, so turning one on
# keeps the cached answers (LocalChatReader's prompt-prefix reuse: in float32 the same greedy replies, tested on
# real prompts and counted by bench/prompt_prefix_reuse.py, as `icr2 compare --batch-size` is left out).
SPEED_PARAMETERS = ("reuse_prompt_prefix",)


# The init parameter through which components name the index config they read (IndexRetriever's `index`, the
# need-features gates' `index`); a value ending in .yaml/.yml is a config path and a shipped config's name
# (`kilt-sample`) is one too (an Elasticsearch index *name*, e.g. the writer's `index: icr2-kilt`, is not).
INDEX_PARAMETER = "index"


def _file_of(kind: str, value: str) -> Path:
    """The file a parameter naming a ``kind`` file reads (a path that exists, else a shipped name); a value that
    is neither comes back as a path, whose absence the fingerprint records."""
    try:
        return resolve_file(kind, Path(value).expanduser())
    except FileNotFoundError:
        return Path(value).expanduser()


def is_index_config(value: str) -> bool:
    """Whether an ``index`` parameter's value names an index config: a .yaml/.yml path or a shipped config's name."""
    return value.lower().endswith((".yaml", ".yml")) or is_shipped_name("indexing", value)


def _string_parameters(value: Any, name: str, found: set[str], accept) -> None:
    """Collect into ``found`` every string value of an init parameter called ``name`` (at any depth of ``value``)
    that ``accept`` takes; a non-matching value under that name is walked like any other."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == name and isinstance(item, str) and accept(item):
                found.add(item)
            else:
                _string_parameters(item, name, found, accept)
    elif isinstance(value, list):
        for item in value:
            _string_parameters(item, name, found, accept)


def index_configs(data: dict) -> list[str]:
    """The index configs a parsed pipeline's components read, sorted: every ``index`` init parameter (at any
    depth) naming a .yaml/.yml file or a shipped config, and the default config of an IndexRetriever that names
    none."""
    found: set[str] = set()
    for component in (data.get("components") or {}).values():
        if not isinstance(component, dict):
            continue
        parameters = component.get("init_parameters")
        if str(component.get("type", "")).rsplit(".", 1)[-1] == "IndexRetriever" and (
                not isinstance(parameters, dict) or INDEX_PARAMETER not in parameters):
            found.add(DEFAULT_INDEX_CONFIG)  # IndexRetriever's default `index`
        _string_parameters(parameters, INDEX_PARAMETER, found, is_index_config)
    return sorted(found)


def index_fingerprint(paths: list[str]) -> dict[str, Any]:
    """What decides the passages the configs ``paths`` retrieve: each config's parsed contents (read as the
    components read it: a path relative to the working directory, or a shipped config's name) and
    ``icr2_components.stores.retrieval_version.RETRIEVAL_BEHAVIOUR_VERSION``. A missing or
    unreadable config contributes its path (or its raw text): loading the pipeline fails later with a clear error."""
    configs: dict[str, Any] = {}
    for path in paths:
        file = _file_of("indexing", path)
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            configs[path] = {"unreadable": path}
            continue
        try:
            configs[path] = {"config": yaml.safe_load(text)}
        except yaml.YAMLError:
            configs[path] = {"unparsed": file_hash(text)}
    # read at call time (not imported by name), so the constant has exactly one home
    return {"configs": configs, "retrieval_behaviour_version": retrieval_version.RETRIEVAL_BEHAVIOUR_VERSION}


# The init parameter through which components name a file they were fitted into (a gate artifact, probed heads).
ARTIFACT_PARAMETER = "artifact"


def artifact_paths(data: dict) -> list[str]:
    """The artifact files a parsed pipeline's components read, sorted: every ``artifact`` init parameter (at any
    depth) that is a non-empty string."""
    found: set[str] = set()
    for component in (data.get("components") or {}).values():
        if isinstance(component, dict):
            _string_parameters(component.get("init_parameters"), ARTIFACT_PARAMETER, found, lambda v: bool(v.strip()))
    return sorted(found)


def artifact_fingerprint(paths: list[str]) -> dict[str, Any]:
    """What decides what the artifacts ``paths`` make a pipeline do: each file's bytes, and for a gate artifact
    (``artifacts.gate_artifact``) the vector file it names beside itself (``vectors_file``, a knn gate's neighbours)
    and the index config its features read (``index``: ``index_fingerprint``). So a retrained gate or re-probed heads
    change the pipeline's hash even when the path stays; a shipped artifact's name is fingerprinted by the file it
    names. A missing file contributes its path: loading fails later with a clear error."""
    import json

    fingerprints: dict[str, Any] = {}
    for path in paths:
        file = _file_of("artifacts", path)
        try:
            raw = file.read_bytes()
        except OSError:
            fingerprints[path] = {"unreadable": path}
            continue
        entry: dict[str, Any] = {"sha256": hashlib.sha256(raw).hexdigest()}
        try:
            parsed = json.loads(raw)
        except ValueError:  # not JSON (or not text): its bytes are the whole story
            parsed = None
        if isinstance(parsed, dict):
            vectors = parsed.get("vectors_file")
            if isinstance(vectors, str) and vectors:
                try:
                    entry["vectors_sha256"] = hashlib.sha256((file.parent / vectors).read_bytes()).hexdigest()
                except OSError:
                    entry["vectors_sha256"] = {"unreadable": str(file.parent / vectors)}
            index = parsed.get("index")
            if isinstance(index, str) and is_index_config(index):
                entry["index"] = index_fingerprint([index])
        fingerprints[path] = entry
    return fingerprints


def string_parameters(value: Any, where: str = ""):
    """``(dotted parameter, string)`` of every string init-parameter value at any depth of ``value``."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from string_parameters(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from string_parameters(item, f"{where}[{position}]")


def trained_fingerprint(data: dict) -> dict[str, Any]:
    """``{path: training_ids.json sha256}`` for every init parameter naming a folder made by ``icr2 train``
    (``artifacts.training_ids``; its ``run_id`` is new with every run), so a reader or head retrained at the same
    path changes the hash. A trained folder without the file contributes its path (compare refuses it later)."""
    from icr2_components.artifacts.training_ids import TrainingIdsError, find_trained_artifact

    found: dict[str, Any] = {}
    for component in (data.get("components") or {}).values():
        if not isinstance(component, dict):
            continue
        for _, value in string_parameters(component.get("init_parameters") or {}):
            if not value.strip() or "\n" in value:
                continue
            try:
                artifact = find_trained_artifact(value)
            except TrainingIdsError:
                found[value] = {"unrecorded": value}
                continue
            if artifact is not None:
                found[value] = artifact.file_sha256
    return found


def _without_speed_parameters(components: Any) -> Any:
    """``components`` without the ``SPEED_PARAMETERS`` among their init parameters (anything else as it is)."""
    if not isinstance(components, dict):
        return components
    kept = {}
    for name, component in components.items():
        parameters = component.get("init_parameters") if isinstance(component, dict) else None
        if isinstance(parameters, dict) and any(key in parameters for key in SPEED_PARAMETERS):
            component = {**component, "init_parameters": {k: v for k, v in parameters.items()
                                                          if k not in SPEED_PARAMETERS}}
        kept[name] = component
    return kept


def with_prompt_prefix_reuse(data: dict, pipeline: Pipeline) -> dict:
    """``data`` with ``reuse_prompt_prefix: true`` for every component of ``pipeline`` (loaded from it) whose class
    takes that init parameter (``LocalChatReader``); the others as they are."""
    import inspect

    changed = copy.deepcopy(data)
    for name, component in pipeline.walk():
        if "reuse_prompt_prefix" in inspect.signature(type(component).__init__).parameters:
            entry = changed["components"][name]
            entry["init_parameters"] = {**(entry.get("init_parameters") or {}), "reuse_prompt_prefix": True}
    return changed


def behaviour_hash(data: dict) -> str:
    """Hash of the parts of a parsed pipeline YAML that change its answers (``BEHAVIOUR_KEYS`` and
    ``metadata.context_input``, which decides what a controlled context type replaces); for a pipeline whose
    components read an index, the index fingerprint (``index_fingerprint``: each config's contents and
    ``RETRIEVAL_BEHAVIOUR_VERSION``); and for one whose components read artifacts, their contents
    (``artifact_fingerprint``); for one reading a fine-tuned folder, its training record (``trained_fingerprint``).
    So a changed config, store, retrained gate or reader, or re-probed heads change the hash. A
    pipeline that reads neither hashes exactly as before the fingerprints existed."""
    import json

    material = {key: data.get(key) for key in BEHAVIOUR_KEYS}
    material["components"] = _without_speed_parameters(material["components"])
    material["context_input"] = (data.get("metadata") or {}).get("context_input")
    configs = index_configs(data)
    if configs:  # only then: index-free pipelines (closed_book, oracle) keep their hash and their cached answers
        material["index"] = index_fingerprint(configs)
    artifacts = artifact_paths(data)
    if artifacts:
        material["artifacts"] = artifact_fingerprint(artifacts)
    trained = trained_fingerprint(data)
    if trained:  # only then: pipelines reading no fine-tuned folder keep their hash
        material["trained"] = trained
    return file_hash(json.dumps(material, sort_keys=True, default=str))


@dataclass
class PipelineSpec:
    """One comparable pipeline: its file, name, hash, declared IO, and context entry (None: reads no passages)."""

    path: str
    name: str
    text: str
    data: dict
    inputs: dict[str, list[str]]
    outputs: dict[str, str]
    context_input: str | None
    hash: str
    backend: Backend | None = None
    _components: dict[str, SuperComponent] = field(default_factory=dict, repr=False)

    @classmethod
    def from_file(cls, path: str, backend: Backend | None = None,
                  reuse_prompt_prefix: bool = False) -> PipelineSpec:
        """Load and check ``path`` (a pipeline YAML, or a shipped pipeline's name); with ``backend``
        (``icr2_components.backends``) its model-using components follow that backend (a served reader, served token
        counts), and the hash covers the backend. ``reuse_prompt_prefix``: every reader that can reuse the last
        prompt's key/value cache does (``with_prompt_prefix_reuse``); the hash stays (``SPEED_PARAMETERS``)."""
        file = resolve_file("pipelines", path)
        if not file.exists():
            raise FileNotFoundError(f"Pipeline file not found: {path}")
        if file.is_dir():
            raise PipelineSpecError(f"{path} is a folder; give a pipeline YAML in it or a shipped pipeline's name.")
        text = file.read_text()
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as error:
            raise PipelineSpecError(f"{path} is not valid YAML: {error}") from error
        source = str(path)
        if backend is not None:
            data = apply_backend(data, backend, source)
            text = yaml.safe_dump(data, sort_keys=False)
            source = f"{path} on backend {backend.describe()}"
        data, switched = apply_index_switch(data)  # ICR2_INDEX_CONFIG; unset: data untouched, the same hash
        if switched:
            text = yaml.safe_dump(data, sort_keys=False)
            source = f"{source} on index {index_switch()}"
        pipeline = loads_pipeline(text, source=source)  # refuses modules outside the allowlist
        if reuse_prompt_prefix:
            data = with_prompt_prefix_reuse(data, pipeline)
            text = yaml.safe_dump(data, sort_keys=False)
            pipeline = loads_pipeline(text, source=f"{source} reusing prompt prefixes")
        inputs, outputs = parse_declared_io(data, str(path))
        context_input = (data.get("metadata") or {}).get("context_input")
        if context_input is not None and (not isinstance(context_input, str) or "." not in context_input):
            raise PipelineSpecError(
                f"{path}: metadata.context_input must be `component.socket`, got {context_input!r}."
            )
        spec = cls(str(path), file.stem, text, data, inputs, outputs, context_input, behaviour_hash(data), backend)
        spec._components["open"] = spec._wrap(pipeline, str(path))  # the declared IO is checked here
        return spec

    @property
    def documents_input(self) -> str | None:
        """The declared input fed with passages (the oracle's gold passages), if any."""
        if self.context_input is None:
            return None
        for name, targets in self.inputs.items():
            if self.context_input in targets:
                return name
        return None

    def declared_mappings(self) -> tuple[dict[str, list[str]], dict[str, str]]:
        """The declared ``inputs``/``outputs`` as Haystack ``SuperComponent`` mappings (``input_mapping``,
        ``output_mapping``): what ``technique_component`` wraps and what compare and serve run through.

        :raises PipelineSpecError: two declared outputs read the same socket (a SuperComponent maps a socket once).
        """
        output_mapping: dict[str, str] = {}
        for name, path in self.outputs.items():
            if path in output_mapping:
                raise PipelineSpecError(f"{self.path}: outputs {output_mapping[path]!r} and {name!r} both read {path}; "
                                        "a SuperComponent maps each socket to one output, so declare it once.")
            output_mapping[path] = name
        return {name: list(targets) for name, targets in self.inputs.items()}, output_mapping

    def _wrap(self, pipeline: Pipeline, source: str, extra_outputs: tuple[str, ...] = ()) -> SuperComponent:
        """``pipeline`` (the whole one or a variant) as a ``SuperComponent`` over the declared mappings: the declared
        inputs and outputs its components still have, ``CONTEXT_INPUT`` where the context entry is open and no
        declared input feeds it, a setting input per open ``SETTING_SOCKETS`` socket, and as further outputs, named
        by their paths, every output socket of the traced components, of the reader's prompt feeds and of the
        components in ``extra_outputs`` (what a record reads beside the declared outputs).

        :raises PipelineSpecError: the mappings do not fit the pipeline (SuperComponent's check, with its reason).
        """
        declared_inputs, declared_outputs = self.declared_mappings()
        existing = {name for name, _ in pipeline.walk()}
        open_inputs = pipeline.inputs()
        input_mapping = {}
        for name, targets in declared_inputs.items():
            kept = [target for target in targets if target.split(".", 1)[0] in existing]
            if kept:
                input_mapping[name] = kept
        if self.context_input and not self.documents_input:
            component, socket = self.context_input.split(".", 1)
            if socket in open_inputs.get(component, {}):
                input_mapping[CONTEXT_INPUT] = [self.context_input]
        for component, sockets in open_inputs.items():
            for socket in SETTING_SOCKETS:
                if socket in sockets:
                    input_mapping.setdefault(setting_input(component, socket), [f"{component}.{socket}"])
        output_mapping = {path: name for path, name in declared_outputs.items() if path.split(".", 1)[0] in existing}
        all_outputs = pipeline.outputs(include_components_with_connected_outputs=True)
        read = {*traced_components(pipeline), *(sender for sender, _ in prompt_feeds(pipeline)), *extra_outputs}
        for component in sorted(read & existing):
            for socket in all_outputs.get(component, {}):
                output_mapping.setdefault(f"{component}.{socket}", f"{component}.{socket}")
        try:
            return SuperComponent(pipeline=pipeline, input_mapping=input_mapping, output_mapping=output_mapping)
        except (InvalidMappingTypeError, InvalidMappingValueError) as error:
            raise PipelineSpecError(
                f"{source}: its declared `inputs`/`outputs` do not map onto the pipeline ({error}). An input names "
                "an open input socket (one no connection feeds), an output a component's output socket."
            ) from error

    def _variant(self, controlled: bool) -> str:
        """``controlled`` where a controlled context type changes the pipeline (it has a context entry that no
        declared input feeds), else ``open``."""
        return "controlled" if controlled and self.context_input and not self.documents_input else "open"

    def component(self, controlled: bool) -> SuperComponent:
        """The pipeline (``controlled``: the variant without what feeds the context entry) as the SuperComponent
        compare and serve run (``_wrap``)."""
        key = self._variant(controlled)
        with _LOADING:  # compare asks from several threads at once: one pipeline per variant
            if key not in self._components:
                source = f"{self.path} (controlled context)"
                pipeline = loads_pipeline(yaml.safe_dump(controlled_variant(self.data, self.context_input)),
                                          source=source)
                self._components[key] = self._wrap(pipeline, source)
            return self._components[key]

    def pipeline(self, controlled: bool) -> Pipeline:
        """The Haystack pipeline :meth:`component` wraps."""
        return self.component(controlled).pipeline

    def warm_up(self, pipeline: Pipeline) -> None:
        """Load every component (models, indexes, artifacts; a no-op once loaded). A component that cannot load
        is a :class:`~icr2_components.errors.ComponentLoadError` naming the pipeline, not one question's failure: every
        question would fail."""
        try:
            pipeline.warm_up()
        except Exception as error:  # whatever the component raised, the pipeline cannot answer
            message = " ".join(str(error).split()) or type(error).__name__
            raise ComponentLoadError(f"pipeline {self.name} ({self.path}) cannot load: {type(error).__name__}: "
                                    f"{message}. Fix the component's settings in {self.path}; nothing was answered "
                                    "with it.") from error

    def _inputs(self, wrapped: SuperComponent, query: str, documents: list[Document] | None,
                max_new_tokens: int | None) -> dict[str, Any]:
        """The SuperComponent inputs for one question: the query, the passages for the context entry, and the answer
        budget for every component with a ``max_new_tokens`` input (whatever its class: an open socket of that name
        is the contract, so a new reader needs no edit here)."""
        given: dict[str, Any] = {}
        if "query" in wrapped.input_mapping:
            given["query"] = query
        if documents is not None and self.context_input:
            name = self.documents_input or CONTEXT_INPUT
            if name in wrapped.input_mapping:
                given[name] = documents
        if max_new_tokens:
            given.update(dict.fromkeys(setting_inputs(wrapped, "max_new_tokens").values(), max_new_tokens))
        return given

    def _record(self, pipeline: Pipeline, result: dict, reply: ChatMessage | None, documents: list[Document] | None,
                controlled: bool, latency: float) -> dict[str, Any]:
        """What compare records of one answer: the reply's text, the passages shown, the prompt's tokens, and
        the prompt and what the techniques did (:func:`answer_trace`)."""
        shown = None
        declared = None  # what the pipeline says it showed (its `documents` output), when it produced it
        if "documents" in self.outputs:
            doc_component, doc_socket = self.outputs["documents"].split(".", 1)
            declared = (result.get(doc_component) or {}).get(doc_socket)
        # given passages count as shown only when the pipeline has a context entry that puts them in its prompt;
        # a component there that keeps some of them (a retrieval head, RAP) or reorders them says what was shown
        if controlled and documents is not None and self.context_input:
            shown = list(declared if declared is not None else documents)
        elif "documents" in self.outputs:
            shown = list(declared or [])
        elif documents is not None and self.context_input:
            shown = list(documents)
        return {
            "answer": (reply.text or "") if reply is not None else "",
            "shown_ids": None if shown is None else [d.id for d in shown],
            # their text, in the same order: what a judge of the answer reads (evaluation.judging)
            "shown_passages": None if shown is None else [d.content or "" for d in shown],
            "prompt_tokens": (reply.meta or {}).get("prompt_tokens") if reply is not None else None,
            "latency_s": latency,
            # "length": the answer was cut at its token budget (counted in reports, not logged per answer)
            "finish_reason": (reply.meta or {}).get("finish_reason") if reply is not None else None,
            **answer_trace(pipeline, result, shown, documents),
        }

    def run(self, query: str, documents: list[Document] | None, controlled: bool,
            max_new_tokens: int | None = None) -> dict[str, Any]:
        """Answer one question; ``documents`` go to the context entry. Returns answer, shown ids, tokens, latency."""
        wrapped, given = self._prepared(query, documents, controlled, max_new_tokens)
        start = time.perf_counter()
        outputs = wrapped.run(**given)
        return self._answered(wrapped, outputs, documents, controlled, time.perf_counter() - start)

    async def run_async(self, query: str, documents: list[Document] | None, controlled: bool,
                        max_new_tokens: int | None = None) -> dict[str, Any]:
        """:meth:`run` through the SuperComponent's ``run_async``: components with ``run_async`` (the served reader,
        the served gate) are awaited, so several questions' requests overlap; the same record as :meth:`run`."""
        wrapped, given = self._prepared(query, documents, controlled, max_new_tokens)
        start = time.perf_counter()
        outputs = await wrapped.run_async(**given)
        return self._answered(wrapped, outputs, documents, controlled, time.perf_counter() - start)

    def _prepared(self, query: str, documents: list[Document] | None, controlled: bool,
                  max_new_tokens: int | None) -> tuple[SuperComponent, dict[str, Any]]:
        """The warmed-up SuperComponent and its inputs for one question."""
        wrapped = self.component(controlled)
        given = self._inputs(wrapped, query, documents, max_new_tokens)
        self.warm_up(wrapped.pipeline)
        return wrapped, given

    def _answered(self, wrapped: SuperComponent, outputs: dict[str, Any], documents: list[Document] | None,
                  controlled: bool, latency: float) -> dict[str, Any]:
        result = nested_outputs(wrapped, outputs)
        reply_component, reply_socket = self.outputs["replies"].split(".", 1)
        replies = result.get(reply_component, {}).get(reply_socket) or []
        return self._record(wrapped.pipeline, result, replies[0] if replies else None, documents, controlled, latency)

    # -- answering many questions in one generate call -------------------------------------------------------

    def unbatched_because(self, controlled: bool) -> str | None:
        """None when this pipeline's answers can be generated in batches (:meth:`run_batch`): its reader has a
        ``run_batch`` (``LocalChatReader``) and is the last step (nothing reads its replies). Otherwise why not,
        in words: the reader's own ``unbatched_because`` (white-box decoding that needs per-prompt state), or
        the pipeline's shape."""
        pipeline = self.pipeline(controlled)
        reader_name = self.outputs["replies"].split(".", 1)[0]
        reader = self._reader(controlled)
        if reader is None:
            return f"its replies come from {reader_name!r}, which is not in the pipeline"
        if not callable(getattr(reader, "run_batch", None)):
            reason = getattr(reader, "unbatched_because", None) or "it has no run_batch"
            return f"its reader {type(reader).__name__} answers one prompt at a time: {reason}"
        if any(True for _ in pipeline.graph.successors(reader_name)):
            return f"its reader {reader_name!r} feeds other components"
        edges = pipeline.graph.in_edges(reader_name, data="to_socket")
        connected = {getattr(socket, "name", socket) for _, _, socket in edges}
        if connected - {"messages"}:
            return f"its reader {reader_name!r} takes connected inputs other than messages"
        return None

    def batch_caveat(self, controlled: bool) -> str | None:
        """For a pipeline that batches: None when batched replies equal those one at a time, otherwise why they
        may not (the reader's ``batch_caveat``: half precision)."""
        caveat = getattr(self._reader(controlled), "batch_caveat", None)
        return caveat() if callable(caveat) else None

    def _reader(self, controlled: bool):
        """The component whose replies the pipeline answers with (None if the pipeline lacks it)."""
        return dict(self.pipeline(controlled).walk()).get(self.outputs["replies"].split(".", 1)[0])

    def _prefix(self, controlled: bool) -> SuperComponent:
        """The pipeline without its reader (everything that builds the reader's messages), wrapped so that it also
        gives what feeds the reader."""
        key = f"prefix:{self._variant(controlled)}"
        with _LOADING:
            if key not in self._components:
                base = controlled_variant(self.data, self.context_input if key == "prefix:controlled" else None)
                reader = self.outputs["replies"].split(".", 1)[0]
                base["components"] = {k: v for k, v in base["components"].items() if k != reader}
                base["connections"] = [
                    c
                    for c in base.get("connections") or []
                    if c["receiver"].split(".", 1)[0] != reader and c["sender"].split(".", 1)[0] != reader
                ]
                source = f"{self.path} (up to its reader)"
                feeds = tuple(sender for sender, _ in self._reader_feeds(controlled))
                self._components[key] = self._wrap(loads_pipeline(yaml.safe_dump(base), source=source), source, feeds)
            return self._components[key]

    def _reader_feeds(self, controlled: bool) -> list[tuple[str, str]]:
        """``(component, socket)`` of every output connected to the reader."""
        reader_name = self.outputs["replies"].split(".", 1)[0]
        edges = self.pipeline(controlled).graph.in_edges(reader_name, data="from_socket")
        return [(sender, getattr(socket, "name", socket)) for sender, _, socket in edges]

    def run_batch(self, items: list[tuple[str, list[Document] | None]], controlled: bool,
                  max_new_tokens: int | None = None) -> list[dict[str, Any]]:
        """Answer several questions ``(query, documents)``: each runs the pipeline up to its reader on its own,
        then the reader generates every reply in one call (``run_batch``). The records are :meth:`run`'s (greedy
        replies are the same); ``latency_s`` is a question's own steps plus its share of the batch's generation.
        Only for a pipeline whose :meth:`unbatched_because` is None."""
        reason = self.unbatched_because(controlled)
        if reason is not None:
            raise PipelineSpecError(f"{self.path} cannot answer in batches: {reason}.")
        full = self.pipeline(controlled)
        prefix = self._prefix(controlled)
        reader_name = self.outputs["replies"].split(".", 1)[0]
        reader = full.get_component(reader_name)
        feeds = self._reader_feeds(controlled)
        prepared = []
        for query, documents in items:
            start = time.perf_counter()
            result = nested_outputs(prefix, prefix.run(**self._inputs(prefix, query, documents, max_new_tokens)))
            messages = next((result[sender][socket] for sender, socket in feeds
                             if socket in result.get(sender, {})), None)
            if messages is None:
                raise PipelineSpecError(
                    f"{self.path}: no component produced the messages of its reader {reader_name!r}."
                )
            prepared.append((result, messages, time.perf_counter() - start))
        self.warm_up(prefix.pipeline)
        self.warm_up(full)  # the reader (the rest is shared with the prefix through the model and index caches)
        start = time.perf_counter()
        replies = reader.run_batch([messages for _, messages, _ in prepared], max_new_tokens=max_new_tokens)
        share = (time.perf_counter() - start) / len(prepared)
        return [self._record(full, result, reply, documents, controlled, seconds + share)
                for (result, _, seconds), reply, (_, documents) in zip(prepared, replies, items, strict=True)]


TRACE_METHOD = "trace_record"
"""A component whose class has this static method declares what it did for one answer: compare calls it with the
component's outputs and records the dict it returns (None: nothing to say) in the answer's ``trace`` under the
component's name (the gate's decision and score, the passages RAP kept and dropped, the corpus builder's budget
and confounders). Lists under keys ending in ``_ids`` name passages: their texts, where the run has them and they
were not shown, go to ``trace_passages``."""
PROMPT_SOCKET = "messages"  # the readers' input of chat messages: what feeds it is the prompt
MAX_PROMPT_CHARS = 20_000  # a longer prompt is recorded cut there, with its whole length (``prompt_chars``)
MAX_TRACE_PASSAGE_CHARS = 50_000  # the texts of passages a trace names but the prompt did not show, in all


def traced_components(pipeline: Pipeline) -> list[str]:
    """The components of ``pipeline`` that declare a trace (``TRACE_METHOD``), in the pipeline's order."""
    return [name for name, instance in pipeline.walk() if callable(getattr(type(instance), TRACE_METHOD, None))]


def prompt_feeds(pipeline: Pipeline) -> list[tuple[str, str]]:
    """``(component, socket)`` of every output connected to a reader's ``messages`` input (under a gate, one per
    branch; only the branch that ran has an output)."""
    return [(sender, getattr(data["from_socket"], "name", data["from_socket"]))
            for sender, _, data in pipeline.graph.edges(data=True)
            if getattr(data["to_socket"], "name", data["to_socket"]) == PROMPT_SOCKET]


def prompt_text(messages: Any) -> str | None:
    """The chat messages a reader was given as text: each ``role:`` and its text, a blank line between; None if
    they are not chat messages."""
    if not isinstance(messages, list) or not all(isinstance(m, ChatMessage) for m in messages):
        return None
    return "\n\n".join(f"{m.role.value}:\n{m.text or ''}" for m in messages)


def answer_trace(pipeline: Pipeline, result: dict, shown: list[Document] | None,
                 given: list[Document] | None) -> dict[str, Any]:
    """The record fields that describe how one answer came about, read from the pipeline's outputs (``result``, run
    with :func:`traced_components` and :func:`prompt_feeds` in ``include_outputs_from``): ``prompt`` (text,
    cut at ``MAX_PROMPT_CHARS``; ``prompt_chars`` its whole length, ``prompt_truncated`` when cut), ``trace``
    (component name -> what it did) and ``trace_passages`` (id -> text of the passages a trace names that were not
    shown, up to ``MAX_TRACE_PASSAGE_CHARS`` in all; ``trace_passages_truncated`` when some were left out). Fields
    with nothing to say are absent. They describe the answer; they are no part of its cache key."""
    fields: dict[str, Any] = {}
    for sender, socket in prompt_feeds(pipeline):
        text = prompt_text((result.get(sender) or {}).get(socket))
        if text is not None:
            fields["prompt_chars"] = len(text)
            if len(text) > MAX_PROMPT_CHARS:
                text, fields["prompt_truncated"] = text[:MAX_PROMPT_CHARS], True
            fields["prompt"] = text
            break
    components = dict(pipeline.walk())
    trace: dict[str, Any] = {}
    texts: dict[str, str] = {d.id: d.content or "" for d in given or []}
    for name in traced_components(pipeline):
        outputs = result.get(name)
        if not isinstance(outputs, dict):
            continue  # it did not run (a branch not taken)
        for value in outputs.values():
            if isinstance(value, list):
                texts.update((d.id, d.content or "") for d in value if isinstance(d, Document))
        entry = getattr(type(components[name]), TRACE_METHOD)(outputs)
        if entry:
            trace[name] = entry
    if trace:
        fields["trace"] = trace
        shown_ids = {d.id for d in shown or []}
        named = [i for entry in trace.values() for key, ids in entry.items() if key.endswith("_ids")
                 and isinstance(ids, list) for i in ids if isinstance(i, str)]
        passages, room = {}, MAX_TRACE_PASSAGE_CHARS
        for passage_id in dict.fromkeys(named):
            if passage_id in shown_ids or passage_id not in texts:
                continue
            if len(texts[passage_id]) > room:
                fields["trace_passages_truncated"] = True
                break
            passages[passage_id] = texts[passage_id]
            room -= len(texts[passage_id])
        if passages:
            fields["trace_passages"] = passages
    return fields


def controlled_variant(data: dict, context_input: str | None) -> dict:
    """The pipeline dict with every component that (only) feeds ``context_input`` removed, transitively."""
    variant = copy.deepcopy(data)
    for key in ("inputs", "outputs"):
        variant.pop(key, None)
    if not context_input:
        return variant
    connections = variant.get("connections") or []
    removed = {c["sender"].split(".", 1)[0] for c in connections if c["receiver"] == context_input}
    changed = True
    while changed:
        changed = False
        for name in variant["components"]:
            if name in removed:
                continue
            receivers = {c["receiver"].split(".", 1)[0] for c in connections if c["sender"].split(".", 1)[0] == name}
            if receivers and receivers <= removed:
                removed.add(name)
                changed = True
    variant["components"] = {k: v for k, v in variant["components"].items() if k not in removed}
    variant["connections"] = [
        c for c in connections
        if c["sender"].split(".", 1)[0] not in removed and c["receiver"].split(".", 1)[0] not in removed
    ]
    return variant


__all__ = [
    "PipelineLoadError",
    "PipelineSpec",
    "PipelineSpecError",
    "artifact_fingerprint",
    "artifact_paths",
    "behaviour_hash",
    "controlled_variant",
    "index_configs",
    "index_fingerprint",
    "parse_declared_io",
]
