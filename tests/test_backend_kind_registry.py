"""An LLM backend kind is one registered class in one file: a new kind, written here into a temporary module and
imported from there, is read from a backend file, rewrites the pipelines' components by the roles they declare,
and refuses the components needing what it does not provide; nothing in the package names it."""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from icr2_components.backends import BackendError, register_backend_kind
from icr2_components.backends.kind import BackendKind, backend_kind_class, backend_kind_names
from icr2_components.backends.pipelines import apply_backend, backend_from_dict

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "icr2_components"

NEW_KIND = textwrap.dedent('''
    """``kind: batch_api``: a (pretend) batch API: answers come back later, only tokens, counted with a named
    tokenizer."""

    from dataclasses import dataclass

    from icr2_components.backends import BackendKind, register_backend_kind


    @dataclass(frozen=True)
    class BatchSettings:
        endpoint: str = "https://batch.example/v1"
        tokenizer: str = "smollm2-135m-instruct"

        def __post_init__(self):
            if not self.endpoint.startswith("https://"):
                raise ValueError(f"endpoint must be an https URL, got {self.endpoint!r}.")


    @register_backend_kind("batch_api")
    class BatchApiBackend(BackendKind):
        provides = frozenset({"tokenizer"})
        Settings = BatchSettings
        max_concurrency = 64

        def describe(self):
            return f"batch API at {self.settings.endpoint}"

        def tokenizer_spec(self):
            return self.settings.tokenizer

        def follow_chat_reader(self, type_name, init_parameters):
            return {"type": "haystack.components.generators.chat.openai.OpenAIChatGenerator",
                    "init_parameters": {"api_base_url": self.settings.endpoint, "model": init_parameters["model"]}}
''')


@pytest.fixture(scope="module")
def batch_kind(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "batch_api_backend.py").write_text(NEW_KIND)
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module("batch_api_backend")
    finally:
        sys.path.remove(str(folder))


@pytest.mark.unit
def test_the_registry_holds_the_built_in_kinds():
    assert {"local", "served"} <= set(backend_kind_names())
    assert backend_kind_class("local").provides == {"weights", "tokenizer", "logprobs"}
    assert backend_kind_class("served").provides == {"tokenizer", "logprobs"}
    with pytest.raises(BackendError, match="kind must be one of the registered backend kinds"):
        backend_from_dict({"kind": "remote"}, "backends/bad.yaml")


def test_a_new_kind_is_one_module(batch_kind):
    backend = backend_from_dict({"kind": "batch_api", "endpoint": "https://batch.example/v2"}, "backends/batch.yaml")
    assert backend.kind_name == "batch_api" and backend.settings.endpoint == "https://batch.example/v2"
    assert backend.describe() == "batch (batch API at https://batch.example/v2)"
    assert type(backend.kind).max_concurrency == 64 and backend.concurrency == 64  # the kind's default
    assert backend_kind_class("served").max_concurrency == 4 and backend_kind_class("local").max_concurrency is None
    with pytest.raises(BackendError, match=r"backends/batch\.yaml: endpoint must be an https URL"):
        backend_from_dict({"kind": "batch_api", "endpoint": "http://x"}, "backends/batch.yaml")
    with pytest.raises(
        BackendError,
        match=r"unknown key\(s\) \['served_model'\] in .*\(kind: batch_api\); "
        r"allowed keys: \['endpoint', 'tokenizer'\]",
    ):
        backend_from_dict({"kind": "batch_api", "served_model": {}}, "backends/batch.yaml")
    # the roles the components declare: readers answer through the new kind, budgets count with its tokenizer
    data = yaml.safe_load((REPO / "pipelines" / "cic_rag_lost_in_the_middle.yaml").read_text())
    moved = apply_backend(data, backend, "cic_rag_lost_in_the_middle.yaml")
    types = [entry["type"] for entry in moved["components"].values()]
    assert "haystack.components.generators.chat.openai.OpenAIChatGenerator" in types
    assert "icr2_components.readers.local_chat_reader.LocalChatReader" not in types
    budgets = [e for e in moved["components"].values() if "tokenizer" in (e.get("init_parameters") or {})]
    assert budgets and all(e["init_parameters"]["tokenizer"] == "smollm2-135m-instruct" for e in budgets)
    # a component needing the weights is refused, saying why
    with pytest.raises(BackendError, match=r"'rap_filter' \(RetrievalAttentionFilter\) scores passages by the "
                                           r"attention.*needs the weights.*batch API"):
        apply_backend(yaml.safe_load((REPO / "pipelines" / "rap.yaml").read_text()), backend, "rap.yaml")
    # nothing in the package names the new kind
    assert not [p for p in PACKAGE.rglob("*.py") if "batch_api" in p.read_text()]


@pytest.mark.unit
def test_registering_is_checked():
    with pytest.raises(TypeError, match="frozen dataclass"):
        @register_backend_kind("loose")
        class Loose(BackendKind):
            class Settings:
                pass
    with pytest.raises(TypeError, match="what a kind provides is among"):
        @register_backend_kind("gpu_magic")
        class Magic(BackendKind):
            provides = frozenset({"telepathy"})
    assert "loose" not in backend_kind_names() and "gpu_magic" not in backend_kind_names()


@pytest.mark.unit
def test_nothing_branches_on_the_kind_outside_the_kind_files():
    """The local/served switch lives in the kind files only: no `kind == "served"`-style branch elsewhere."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "backends" and path.parent.parent == PACKAGE:
            continue
        text = path.read_text()
        for needle in (
            r'== "served"',
            r'== "local"',
            r"\.is_served\b",
            r"\.served_model is (not )?None",
            r'\("local", "served"\)',
        ):
            if re.search(needle, text):
                offenders.append(f"{path.relative_to(PACKAGE)}: {needle}")
    assert not offenders, offenders
