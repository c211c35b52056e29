"""What every component in the package owes its users (README "Writing a component").

- a docstring with a usage example and the paper's arXiv link;
- Haystack's default serialisation, unless it truly needs its own (listed here with the reason): the default
  reads each ``__init__`` parameter back from the attribute of the same name, so every parameter must be kept
  under its own name, or a YAML round-trip would silently write its default instead;
- no file or model I/O in ``__init__``: building a component (as ``Pipeline.loads`` does) touches nothing on disk.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from haystack.core.component import component
from haystack.core.serialization import component_from_dict, component_to_dict

COMPONENT_PACKAGES = ("builders", "filters", "gates", "rankers", "readers", "reorderers", "retrievers")

# The only components that write their own to_dict/from_dict, and why.
OWN_SERIALISATION = {
    "TimeAwareRetrievalGate": "it holds a chat generator, serialised as a nested component",
    "ContextAwareDecodingReader": "a decoding rule's own parameters arrive as `<rule>_<parameter>` keywords "
                                  "(**rule_parameters, so that a new rule is one file), which the default cannot see",
    "IndexRetriever": "it may hold the user's Haystack document store, serialised as a nested store (type and "
                      "init parameters) as Haystack's own retrievers serialise theirs",
}

# Arguments without which a component cannot be built; paths that do not exist on purpose: __init__ must not
# read them (file I/O belongs in warm_up).
REQUIRED_ARGUMENTS = {
    "ConfounderAwareCorpusBuilder": {"budget_passages": 8},
    "IndexRetriever": {"index": "no/such/index-config.yaml"},
    "RetrievalAttentionFilter": {"artifact": "no/such/retrieval-heads.json"},
    "RetrievalHeadRanker": {"head": "no/such/retrieval-head"},
    "HeadSuppressionReader": {"artifact": "no/such/ph3-heads.json"},
    "ServedChatReader": {"api_base_url": "http://127.0.0.1:8089/v1", "model": "smollm2-135m-instruct"},
}


def component_classes() -> list[type]:
    for package in COMPONENT_PACKAGES:  # importing every module registers its @component classes
        module = importlib.import_module(f"icr2_components.{package}")
        for info in pkgutil.walk_packages(module.__path__, f"{module.__name__}."):
            importlib.import_module(info.name)
    prefixes = tuple(f"icr2_components.{package}." for package in COMPONENT_PACKAGES)
    found = {cls.__name__: cls for path, cls in component.registry.items() if path.startswith(prefixes)}
    return [found[name] for name in sorted(found)]


CLASSES = component_classes()


def test_the_walk_finds_the_components():
    names = {cls.__name__ for cls in CLASSES}
    assert {"ConfounderAwareCorpusBuilder", "TimeAwareRetrievalGate", "RetrievalAttentionFilter", "LocalChatReader",
            "LostInTheMiddleReorderer", "IndexRetriever", "BiEncoderRanker"} <= names
    assert len(names) >= 18


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@pytest.mark.unit
def test_docstring_has_usage_example_and_paper_link(cls):
    doc = inspect.getdoc(cls) or ""
    assert "Usage example" in doc, f"{cls.__name__}: add a 'Usage example:' block to the class docstring"
    assert "https://arxiv.org/abs/" in doc, f"{cls.__name__}: name the paper with its arXiv link"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@pytest.mark.unit
def test_default_serialisation_keeps_every_init_parameter(cls):
    own = "to_dict" in cls.__dict__ or "from_dict" in cls.__dict__
    if cls.__name__ in OWN_SERIALISATION:
        assert own, f"{cls.__name__} is listed as needing its own serialisation but has none: remove it from the list"
        return
    assert not own, (f"{cls.__name__} writes its own to_dict/from_dict: use Haystack's default, or list it in "
                     "OWN_SERIALISATION with the reason")
    component = cls(**REQUIRED_ARGUMENTS.get(cls.__name__, {}))
    missing = [name for name in inspect.signature(cls.__init__).parameters
               if name not in ("self", "args", "kwargs") and not hasattr(component, name)]
    assert not missing, (
        f"{cls.__name__} does not keep {missing} under the same name: default serialisation would drop them"
    )
    data = component_to_dict(component, "c")
    again = component_from_dict(cls, data, "c")
    assert component_to_dict(again, "c") == data
