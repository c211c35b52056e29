"""One switch that points the whole pipeline library at another index config, without editing a YAML file.

Every shipped pipeline names the shipped index config ``kilt-sample`` (the embedded store). Set the environment
variable ``ICR2_INDEX_CONFIG`` to another index config, a path or a shipped name (``kilt-sample-elasticsearch``), or
pass ``--index CONFIG`` to ``icr2 compare``, ``icr2 serve`` or ``icr2 quickstart`` (which set it for their run),
and every :class:`~icr2_components.retrievers.index_retriever.IndexRetriever` reads that config instead of the
one its YAML names:

- ``IndexRetriever.__init__`` honours the variable, so a pipeline loaded anywhere (``load_pipeline``, Haystack's
  ``Pipeline.loads``, hayhooks) follows it;
- :class:`~icr2_components.pipeline_spec.PipelineSpec` (compare, serve) rewrites the pipeline's data before
  hashing it, so ``icr2 compare``'s answer cache never mixes answers retrieved from two indexes.

Without the switch nothing changes: the pipeline, its serialisation and its hash are exactly those of the YAML
file. A switch naming the same file as the YAML (``--index kilt-sample``) changes nothing either.

Usage:
    >>> import os
    >>> os.environ["ICR2_INDEX_CONFIG"] = "kilt-sample-elasticsearch"
    >>> from icr2_components import load_pipeline
    >>> pipeline = load_pipeline("vanilla_rag")   # retrieves from Elasticsearch
    >>> pipeline.get_component("retriever").index
    'kilt-sample-elasticsearch'
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: the environment variable every IndexRetriever honours
INDEX_CONFIG_ENV = "ICR2_INDEX_CONFIG"
#: the index config the library's pipelines name (and compare's gold passages come from) when nothing is switched
DEFAULT_INDEX_CONFIG = "kilt-sample"
# the component whose `index` init parameter the switch replaces (any import path of it inside the package)
_RETRIEVER_CLASS = "IndexRetriever"


class IndexSwitchError(ValueError):
    """The switch names an index config that does not exist; the message names where the switch was set."""


def index_switch() -> str | None:
    """The index config ``ICR2_INDEX_CONFIG`` names (None when unset or empty); a missing file is an error."""
    value = os.environ.get(INDEX_CONFIG_ENV, "").strip()
    if not value:
        return None
    if _index_config_file(value) is None:
        raise IndexSwitchError(
            f"{INDEX_CONFIG_ENV}={value}: no such index config (from {Path.cwd()}); point it at an index config "
            f"file or a shipped name ({', '.join(_shipped_index_names())}), or unset it."
        )
    return value


def _shipped_index_names() -> list[str]:
    from icr2_components.resources import shipped_names

    return [name for name in shipped_names("indexing") if name != "measured-figures"]


def _index_config_file(value: str) -> Path | None:
    """The file an index config path or shipped name reads, or None when there is none."""
    from icr2_components.resources.lookup import resolve_file

    try:
        path = resolve_file("indexing", Path(value).expanduser())
    except FileNotFoundError:
        return None
    return path if path.is_file() else None


def _same_file(a: str, b: str) -> bool:
    file_a, file_b = _index_config_file(a), _index_config_file(b)
    try:
        return file_a is not None and file_b is not None and file_a.resolve() == file_b.resolve()
    except OSError:
        return a == b


def switched_index(index: str, switch: str | None = None) -> str:
    """The index config a retriever naming ``index`` reads: ``switch`` (default: ``ICR2_INDEX_CONFIG``) when set
    and another file, else ``index`` unchanged."""
    switch = switch if switch is not None else index_switch()
    if switch is None or _same_file(index, switch):
        return index
    return switch


def _is_index_retriever(component: Any) -> bool:
    kind = str(component.get("type", "")) if isinstance(component, dict) else ""
    return kind.startswith("icr2_components.") and kind.rsplit(".", 1)[-1] == _RETRIEVER_CLASS


def apply_index_switch(data: dict[str, Any], switch: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The pipeline dict with every ``IndexRetriever``'s ``index`` switched, and what changed (``name: a -> b``).

    With no switch (``switch`` None and ``ICR2_INDEX_CONFIG`` unset) ``data`` itself comes back, untouched.
    """
    switch = switch if switch is not None else index_switch()
    if switch is None or not isinstance(data, dict):
        return data, []
    changes = []
    switched = copy.deepcopy(data)
    for name, component in (switched.get("components") or {}).items():
        if not _is_index_retriever(component):
            continue
        parameters = component.get("init_parameters")
        if not isinstance(parameters, dict):
            parameters = component["init_parameters"] = {}
        current = parameters.get("index", DEFAULT_INDEX_CONFIG)
        target = switched_index(current, switch) if isinstance(current, str) else switch
        if target != current:
            parameters["index"] = target
            changes.append(f"{name}.index {current} -> {target}")
    return (switched, changes) if changes else (data, [])


@contextlib.contextmanager
def index_switch_set(index: str | None, flag: str = "--index") -> Iterator[str | None]:
    """Set ``ICR2_INDEX_CONFIG`` to ``index`` for the ``with`` block (nothing when ``index`` is None), after
    checking the config loads; the previous value comes back afterwards. Yields the switch in force."""
    if index is None:
        yield index_switch()
        return
    from icr2_components.stores.config import load_index_config

    if _index_config_file(index) is None:
        raise IndexSwitchError(
            f"{flag} {index}: no such index config; pass an index config file or a shipped name "
            f"({', '.join(_shipped_index_names())})."
        )
    load_index_config(index)  # a broken config fails here, naming the file, not at the first retrieval
    previous = os.environ.get(INDEX_CONFIG_ENV)
    os.environ[INDEX_CONFIG_ENV] = index
    try:
        yield index
    finally:
        if previous is None:
            os.environ.pop(INDEX_CONFIG_ENV, None)
        else:
            os.environ[INDEX_CONFIG_ENV] = previous


__all__ = [
    "DEFAULT_INDEX_CONFIG",
    "INDEX_CONFIG_ENV",
    "IndexSwitchError",
    "apply_index_switch",
    "index_switch",
    "index_switch_set",
    "switched_index",
]
