"""Fair pairs: a technique's pipeline differs from its declared baseline only in what the technique names.

A technique YAML in the library declares its baseline (another YAML beside it, by stem) and what it changes::

    metadata:
      technique: reordered_recency
      baseline: vanilla_rag
      differs_in: [reorderer]          # components added, removed or changed in any way
    # or, for one init parameter of a component both pipelines have:
      differs_in: [ranker, retriever.top_k]
    # a difference in the declared inputs/outputs or metadata that no named component explains:
      differs_in: [gate, outputs.documents, metadata.context_input]
    # components the technique calls by another name than the baseline (technique name -> baseline name):
      renamed: {rag_reader: reader}

A reference point that is no technique (closed-book, the oracle) declares ``metadata.role: reference``; it may
also declare a baseline, and is then checked the same way.

:func:`pair_differences` compares the two pipeline dicts: the ``components`` with the named ones removed (the
other components must have the same type and the same init parameters, the named parameters excepted); the
``connections`` once edges touching a named component are removed, where an edge of one pipeline that the other
routes through named components (the re-wired edge a technique is inserted into) is allowed; the declared
``inputs``/``outputs`` likewise (an input socket that a named component fed in the other pipeline may be fed from
outside instead); and the rest of ``metadata`` (``context_input`` and ``tunable`` may differ where they name a
named component). It returns one line per stray difference, and one per named difference that is not there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PAIR_KEYS = frozenset({"technique", "baseline", "differs_in", "renamed", "role"})
"""Metadata keys that describe the pair itself; every other metadata key is compared."""
ROLES = ("reference",)
_IO = ("inputs", "outputs")
_SECTIONS = (*_IO, "metadata")
_MISSING = "(unset)"


class PairDeclarationError(ValueError):
    """A pipeline's ``metadata.baseline``/``differs_in``/``renamed``/``role`` is malformed; the message says how."""


def pair_declaration(data: dict, source: str) -> dict[str, Any]:
    """The checked pair metadata of one pipeline dict: ``baseline`` (str or None), ``differs_in`` (list of str),
    ``renamed`` (dict), ``role`` (str or None). Raises :class:`PairDeclarationError` on a malformed declaration."""
    meta = data.get("metadata") or {}
    baseline, role = meta.get("baseline"), meta.get("role")
    differs_in, renamed = meta.get("differs_in"), meta.get("renamed") or {}
    if role is not None and role not in ROLES:
        raise PairDeclarationError(f"{source}: metadata.role must be one of {list(ROLES)}, got {role!r}.")
    if baseline is None:
        if role is None:
            raise PairDeclarationError(f"{source}: declare metadata.baseline (the pipeline this technique changes) "
                                       "and metadata.differs_in, or metadata.role: reference.")
        if differs_in is not None or meta.get("renamed") is not None:
            raise PairDeclarationError(f"{source}: metadata.differs_in/renamed need a metadata.baseline.")
        return {"baseline": None, "differs_in": [], "renamed": {}, "role": role}
    if not isinstance(baseline, str) or not baseline.strip() or "/" in baseline or baseline.endswith(".yaml"):
        raise PairDeclarationError(f"{source}: metadata.baseline must name a pipeline beside it by stem "
                                   f"(e.g. vanilla_rag), got {baseline!r}.")
    if not isinstance(differs_in, list) or not differs_in or not all(isinstance(x, str) and x for x in differs_in):
        raise PairDeclarationError(f"{source}: metadata.differs_in must list what differs from {baseline} "
                                   "(component names, `component.init_parameter`, `inputs.NAME`, `outputs.NAME` or "
                                   f"`metadata.KEY`), got {differs_in!r}.")
    if not isinstance(renamed, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in renamed.items()):
        raise PairDeclarationError(f"{source}: metadata.renamed must map technique component names to baseline "
                                   f"names, got {renamed!r}.")
    return {"baseline": baseline, "differs_in": list(differs_in), "renamed": dict(renamed), "role": role}


def _component(socket: str) -> str:
    return socket.split(".", 1)[0]


def _rename_socket(socket: Any, renamed: dict[str, str]) -> Any:
    if not isinstance(socket, str) or "." not in socket:
        return socket
    component, rest = socket.split(".", 1)
    return f"{renamed.get(component, component)}.{rest}"


def apply_renames(data: dict, renamed: dict[str, str]) -> dict:
    """A copy of a pipeline dict with its components renamed (``old -> new``) everywhere they are named."""
    if not renamed:
        return data
    clash = set(renamed.values()) & (set(data.get("components") or {}) - set(renamed))
    if clash:
        raise PairDeclarationError(f"metadata.renamed maps onto names the pipeline already uses: {sorted(clash)}.")
    out = dict(data)
    out["components"] = {renamed.get(k, k): v for k, v in (data.get("components") or {}).items()}
    out["connections"] = [{**c, "sender": _rename_socket(c["sender"], renamed),
                           "receiver": _rename_socket(c["receiver"], renamed)} for c in data.get("connections") or []]
    for key in _IO:
        if isinstance(data.get(key), dict):
            out[key] = {name: ([_rename_socket(t, renamed) for t in value] if isinstance(value, list)
                               else _rename_socket(value, renamed)) for name, value in data[key].items()}
    meta = dict(data.get("metadata") or {})
    if "context_input" in meta:
        meta["context_input"] = _rename_socket(meta["context_input"], renamed)
    if isinstance(meta.get("tunable"), dict):
        meta["tunable"] = {_rename_socket(k, renamed): v for k, v in meta["tunable"].items()}
    out["metadata"] = meta
    return out


def _edges(data: dict) -> set[tuple[str, str]]:
    return {(c["sender"], c["receiver"]) for c in data.get("connections") or []}


def _routed_through(edge: tuple[str, str], edges: set[tuple[str, str]], named: set[str]) -> bool:
    """Whether ``edges`` lead from ``edge``'s sender socket to its receiver socket through named components only."""
    sender, receiver = edge
    frontier = {_component(r) for s, r in edges if s == sender and _component(r) in named}
    seen: set[str] = set()
    while frontier:
        current = frontier.pop()
        seen.add(current)
        for s, r in edges:
            if _component(s) != current:
                continue
            if r == receiver:
                return True
            if _component(r) in named and _component(r) not in seen:
                frontier.add(_component(r))
    return False


def _targets(value: Any) -> list[str]:
    return [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)]


def pair_differences(technique: dict, baseline: dict, differs_in: list[str] | None = None,
                     renamed: dict[str, str] | None = None) -> list[str]:
    """Stray differences between a technique's pipeline dict and its baseline's (empty list: a fair pair).

    ``differs_in`` and ``renamed`` default to the technique's ``metadata``. Each line names the difference, e.g.
    ``"retriever.top_k: baseline 3, technique 5 (not named in differs_in)"``.
    """
    meta = technique.get("metadata") or {}
    differs_in = list(meta.get("differs_in") or []) if differs_in is None else list(differs_in)
    renamed = dict(meta.get("renamed") or {}) if renamed is None else dict(renamed)
    technique = apply_renames(technique, renamed)
    declared = _Declared.of(differs_in, renamed)
    problems = _component_differences(technique, baseline, declared)
    problems += _connection_differences(technique, baseline, declared.named)
    input_problems, outside_inputs = _input_differences(technique, baseline, declared)
    problems += input_problems
    problems += _output_differences(technique, baseline, declared)
    problems += _metadata_differences(technique, baseline, declared, outside_inputs)
    for key in sorted((set(technique) | set(baseline)) - {"components", "connections", "metadata", *_IO}):
        if technique.get(key) != baseline.get(key):
            problems.append(f"{key}: baseline {baseline.get(key)!r}, technique {technique.get(key)!r}")
    return problems


@dataclass(frozen=True)
class _Declared:
    """What ``differs_in`` allows to differ (in the technique's names after its renames): whole components
    (``named``), components' init parameters (``parameters``) and entries of inputs, outputs and metadata
    (``io_named``)."""

    named: set[str]
    parameters: dict[str, set[str]]
    io_named: dict[str, set[str]]

    @classmethod
    def of(cls, differs_in: list[str], renamed: dict[str, str]) -> _Declared:
        entries = [x if _component(x) in _SECTIONS else _rename_socket(x, renamed) if "." in x else renamed.get(x, x)
                   for x in differs_in]
        parameters: dict[str, set[str]] = {}
        io_named: dict[str, set[str]] = {key: set() for key in _SECTIONS}
        for entry in entries:
            if "." in entry:
                head, rest = entry.split(".", 1)
                if head in _SECTIONS:
                    io_named[head].add(rest)
                else:
                    parameters.setdefault(head, set()).add(rest)
        return cls({x for x in entries if "." not in x}, parameters, io_named)


def _component_differences(technique: dict, baseline: dict, declared: _Declared) -> list[str]:
    """Components and init parameters that differ without being named, and names that match no difference."""
    named, parameters = declared.named, declared.parameters
    problems: list[str] = []
    t_components, b_components = technique.get("components") or {}, baseline.get("components") or {}
    for name in sorted(named - set(t_components) - set(b_components)):
        problems.append(f"differs_in names component {name!r}, which neither pipeline has")
    for name in sorted(set(t_components) | set(b_components)):
        t, b = t_components.get(name), b_components.get(name)
        if name in named:
            if t == b:
                problems.append(f"differs_in names component {name!r}, but it is the same in both")
            continue
        if t is None or b is None:
            where = "baseline" if t is None else "technique"
            problems.append(f"component {name!r} is only in the {where} (not named in differs_in)")
            continue
        if t.get("type") != b.get("type"):
            problems.append(f"{name}: type {b.get('type')} in the baseline, {t.get('type')} in the technique "
                            "(not named in differs_in)")
            continue
        t_params, b_params = t.get("init_parameters") or {}, b.get("init_parameters") or {}
        for key in sorted(set(t_params) | set(b_params)):
            t_value, b_value = t_params.get(key, _MISSING), b_params.get(key, _MISSING)
            if key in parameters.get(name, set()):
                if t_value == b_value:
                    problems.append(f"differs_in names {name}.{key}, but it is {t_value!r} in both")
            elif t_value != b_value:
                problems.append(f"{name}.{key}: baseline {b_value!r}, technique {t_value!r} (not named in differs_in)")
    for name, keys in sorted(parameters.items()):
        if name not in t_components or name not in b_components:
            problems.append(f"differs_in names {sorted(f'{name}.{k}' for k in keys)}, but {name!r} is not in both "
                            "pipelines; name the component itself")
        else:
            unknown = keys - set(t_components[name].get("init_parameters") or {}) - set(
                b_components[name].get("init_parameters") or {})
            problems.extend(f"differs_in names {name}.{key}, which neither pipeline sets" for key in sorted(unknown))
    return problems


def _connection_differences(technique: dict, baseline: dict, named: set[str]) -> list[str]:
    """Connections between unnamed components that only one pipeline has (and the other does not route through
    named components)."""
    problems: list[str] = []
    t_edges, b_edges = _edges(technique), _edges(baseline)

    def kept(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
        return {e for e in edges if _component(e[0]) not in named and _component(e[1]) not in named}

    for edge in sorted(kept(b_edges) - kept(t_edges)):
        if not _routed_through(edge, t_edges, named):
            problems.append(f"connection {edge[0]} -> {edge[1]} is only in the baseline")
    for edge in sorted(kept(t_edges) - kept(b_edges)):
        if not _routed_through(edge, b_edges, named):
            problems.append(f"connection {edge[0]} -> {edge[1]} is only in the technique")
    return problems


def _input_differences(technique: dict, baseline: dict, declared: _Declared) -> tuple[list[str], set[str]]:
    """Pipeline inputs that feed different unnamed sockets.

    :returns: the problems, and the inputs that feed what differs by declaration (named, or feeding a socket that
        a named component feeds in the baseline).
    """
    named = declared.named
    t_edges, b_edges = _edges(technique), _edges(baseline)

    def fed_by_named(socket: str, edges: set[tuple[str, str]]) -> bool:
        return any(r == socket and _component(s) in named for s, r in edges)

    problems: list[str] = []
    t_inputs, b_inputs = technique.get("inputs") or {}, baseline.get("inputs") or {}
    outside_inputs: set[str] = set()
    for name in sorted(set(t_inputs) | set(b_inputs)):
        if name in declared.io_named["inputs"]:
            outside_inputs.add(name)
            continue
        t_targets = {x for x in _targets(t_inputs.get(name)) if _component(x) not in named}
        b_targets = {x for x in _targets(b_inputs.get(name)) if _component(x) not in named}
        for target in sorted(t_targets - b_targets):
            if fed_by_named(target, b_edges):
                outside_inputs.add(name)
            else:
                problems.append(f"input {name!r} feeds {target} only in the technique")
        for target in sorted(b_targets - t_targets):
            if not fed_by_named(target, t_edges):
                problems.append(f"input {name!r} feeds {target} only in the baseline")
    return problems, outside_inputs


def _output_differences(technique: dict, baseline: dict, declared: _Declared) -> list[str]:
    """Outputs that differ without being named (or coming from named components), and named inputs or outputs
    that neither pipeline declares."""
    problems: list[str] = []
    t_outputs, b_outputs = technique.get("outputs") or {}, baseline.get("outputs") or {}
    for name in sorted(set(t_outputs) | set(b_outputs)):
        t_path, b_path = t_outputs.get(name), b_outputs.get(name)
        if name in declared.io_named["outputs"] or t_path == b_path:
            continue
        if any(isinstance(p, str) and _component(p) in declared.named for p in (t_path, b_path)):
            continue
        problems.append(f"output {name!r}: baseline {b_path or _MISSING}, technique {t_path or _MISSING}")
    for key in _IO:
        present = set(technique.get(key) or {}) | set(baseline.get(key) or {})
        problems.extend(f"differs_in names {key}.{name}, which neither pipeline declares"
                        for name in sorted(declared.io_named[key] - present))
    return problems


def _metadata_differences(technique: dict, baseline: dict, declared: _Declared, outside_inputs: set[str]) -> list[str]:
    """Metadata (besides the pair declaration) that differs without following from what is named."""
    named, parameters = declared.named, declared.parameters
    problems: list[str] = []
    t_meta, b_meta = technique.get("metadata") or {}, baseline.get("metadata") or {}
    for key in sorted((set(t_meta) | set(b_meta)) - PAIR_KEYS):
        t_value, b_value = t_meta.get(key), b_meta.get(key)
        if key in declared.io_named["metadata"]:
            if t_value == b_value:
                problems.append(f"differs_in names metadata.{key}, but it is {t_value!r} in both")
            continue
        if t_value == b_value:
            continue
        if key == "context_input" and any(isinstance(v, str) and _component(v) in named for v in (t_value, b_value)):
            continue
        if key == "gold_documents_input" and {t_value, b_value} - {None} <= outside_inputs:
            continue
        if key == "tunable" and isinstance(t_value or {}, dict) and isinstance(b_value or {}, dict):
            def own(grid: dict | None) -> dict:
                return {k: v for k, v in (grid or {}).items() if _component(k) not in named
                        and k.split(".", 1)[-1] not in parameters.get(_component(k), set())}

            if own(t_value) == own(b_value):
                continue
        problems.append(f"metadata.{key}: baseline {b_value!r}, technique {t_value!r}")
    return problems


def library_pairs(folder: str | Path) -> dict[str, dict[str, Any]]:
    """Every ``*.yaml`` pipeline in ``folder``: its pair declaration, keyed by stem (raises on a malformed one or a
    baseline that is not in the folder)."""
    folder = Path(folder)
    declared = {}
    for path in sorted(folder.glob("*.yaml")):
        declared[path.stem] = pair_declaration(yaml.safe_load(path.read_text()) or {}, str(path))
    for name, declaration in declared.items():
        if declaration["baseline"] is not None and declaration["baseline"] not in declared:
            raise PairDeclarationError(f"{folder / (name + '.yaml')}: metadata.baseline {declaration['baseline']!r} "
                                       f"is not a pipeline in {folder}.")
    return declared


__all__ = ["PAIR_KEYS", "PairDeclarationError", "apply_renames", "library_pairs", "pair_declaration",
           "pair_differences"]
