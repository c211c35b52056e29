"""Generated bad inputs for every configuration type and record mapping the package reads (Hypothesis).

The types are found, not listed by hand: every store type, corpus format and backend kind in its registry, the
index config's sections, the training recipe and every dataclass nested in any of them; a test reads the package's
source for every call of ``dataclass_from_mapping`` and fails on one whose types this file does not generate for.

For every field of every type, generated values of the wrong type (a bool for a number, a string for a list, None
for a required value), NaN and infinity, values out of the declared range, huge strings and unknown keys must give
the type's own error (ConfigError, RecipeError, BackendError, ...) in one line naming the field, never another
exception; generated values of the right type come back unchanged (an integer in a float field as that number).
The readers users call (``index_config_from_dict``, ``recipe_from_dict``, ``backend_from_dict``, question-set and
gate-artifact files) also name the file. Malformed JSON lines and bytes that are not UTF-8 in a JSONL corpus are
skipped by name and count, never raised raw. Each test has a fixed example budget and is derandomized.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Union

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import Field

import icr2_components
from icr2_components import parameters
from icr2_components.artifacts.gate_artifact import GateArtifact
from icr2_components.artifacts.ph3_heads import PH3HeadArtifact
from icr2_components.artifacts.retrieval_heads import RetrievalHeadArtifact
from icr2_components.backends.kind import BackendError, backend_kind_class, backend_kind_names
from icr2_components.backends.pipelines import backend_from_dict
from icr2_components.corpora import corpus_settings_from_mapping
from icr2_components.corpora.reader import corpus_format_names, corpus_reader, corpus_reader_class
from icr2_components.errors import UserInputError
from icr2_components.gates.time_aware_retrieval_gate import GateModelSettings
from icr2_components.kilt.question_sets import QuestionSet, QuestionSetConfig, QuestionSetError
from icr2_components.models.served_model import ServedModel
from icr2_components.stores.config import ConfigError, EmbeddingConfig, WriterConfig, index_config_from_dict
from icr2_components.stores.store_types import store_backend, store_backend_names
from icr2_components.strict_mapping import (
    Fraction,
    NonNegativeInt,
    PositiveInt,
    PositiveNumber,
    dataclass_from_mapping,
    field_types,
)
from icr2_components.text.templates import TASK_TYPES
from icr2_components.training.recipe import RecipeError, TrainingRecipe, recipe_from_dict

pytestmark = pytest.mark.unit

BUDGET = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
READER_BUDGET = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

SERVED = {"api_base_url": "http://127.0.0.1:8089/v1", "model": "m"}
RECIPE = {"method": "rta", "model": "smollm2-135m-instruct", "output_dir": "runs/generated",
          "data": {"train": "train.jsonl"}}
ARTIFACT = {"kind": "threshold", "cut": 0.5, "objective": {}, "probed_ids": []}


def _shipped_artifact(name: str) -> dict[str, Any]:
    return json.loads((Path(icr2_components.__file__).parent / "resources" / "artifacts" / name).read_text())


HEAD_ARTIFACTS = [(RetrievalHeadArtifact, "rap_heads_smollm2.json"), (PH3HeadArtifact, "ph3_heads_smollm2.json")]


@dataclasses.dataclass(frozen=True)
class MappingType:
    """A dataclass read from a mapping: the error its reader raises and the keys it cannot do without."""

    cls: type
    error: type[Exception]
    base: dict[str, Any]


def _nested_dataclasses(cls: type) -> list[type]:
    found = []
    for expected in field_types(cls).values():
        stack = [expected]
        while stack:
            current = stack.pop()
            if dataclasses.is_dataclass(current) and isinstance(current, type):
                found.append(current)
            stack.extend(typing.get_args(current))
    return found


def mapping_types() -> dict[type, MappingType]:
    """Every configuration type and record mapping of the package, found through its registries and roots, with
    every dataclass nested in them."""
    roots: list[MappingType] = [
        *(MappingType(store_backend(name).settings_class, ConfigError, {}) for name in store_backend_names()),
        *(MappingType(corpus_reader_class(name).settings_class, ConfigError, {}) for name in corpus_format_names()),
        *(MappingType(backend_kind_class(name).Settings, BackendError,
                      {"served_model": dict(SERVED)} if name == "served" else {}) for name in backend_kind_names()),
        MappingType(EmbeddingConfig, ConfigError, {}),
        MappingType(WriterConfig, ConfigError, {}),
        MappingType(TrainingRecipe, RecipeError, {**RECIPE, "data": None}),
        MappingType(QuestionSetConfig, QuestionSetError, {}),
        MappingType(GateModelSettings, ValueError, {}),
        MappingType(ServedModel, UserInputError, dict(SERVED)),
        MappingType(GateArtifact, ValueError, dict(ARTIFACT)),
        *(MappingType(cls, ValueError, _shipped_artifact(name)) for cls, name in HEAD_ARTIFACTS),
    ]
    found: dict[type, MappingType] = {}
    queue = list(roots)
    while queue:
        entry = queue.pop(0)
        if entry.cls in found:
            continue
        found[entry.cls] = entry
        queue.extend(MappingType(nested, entry.error, {}) for nested in _nested_dataclasses(entry.cls))
    # the recipe's `data` section is required: its own type is generated for above, the recipe gets a valid one
    found[TrainingRecipe] = MappingType(TrainingRecipe, RecipeError, {**RECIPE, "data": {}})
    return found


TYPES = mapping_types()
FIELDS = [(cls, item.name) for cls in TYPES for item in dataclasses.fields(cls) if item.init]


def _id(value: Any) -> str:
    return value.__name__ if isinstance(value, type) else str(value)


# -- every reader of a mapping is covered --------------------------------------------------------------------------

# Each call of dataclass_from_mapping in the package, by file and first argument, and the root of mapping_types()
# that generates for its types. A new call fails the test below until its types are generated for here.
COVERED_CALLS = {
    ("kilt/question_sets.py", "QuestionSetConfig"): QuestionSetConfig,
    ("stores/config.py", "cls"): EmbeddingConfig,  # the sections of stores.config._SECTIONS
    ("stores/config.py", "backend.settings_class"): "store registry",
    ("corpora/__init__.py", "reader.settings_class"): "corpus registry",
    ("backends/kind.py", "cls.Settings"): "backend kind registry",
    ("training/recipe.py", "cls"): TrainingRecipe,
    ("gates/time_aware_retrieval_gate.py", "cls"): GateModelSettings,
    ("models/served_model.py", "cls"): ServedModel,
    ("artifacts/gate_artifact.py", "cls"): GateArtifact,
    ("artifacts/base.py", "cls"): RetrievalHeadArtifact,  # and PH3HeadArtifact: HEAD_ARTIFACTS
    ("corpora/records.py", "FieldMapping"): "corpus registry",
    ("corpora/records.py", "ChunkingSettings"): "corpus registry",
}


def _calls_in_package() -> set[tuple[str, str]]:
    root = Path(icr2_components.__file__).parent
    calls = set()
    for path in root.rglob("*.py"):
        if path.name == "strict_mapping.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args:
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if name == "dataclass_from_mapping":
                    calls.add((path.relative_to(root).as_posix(), ast.unparse(node.args[0])))
    return calls


def test_every_reader_of_a_mapping_is_generated_for():
    calls = _calls_in_package()
    new = sorted(calls - set(COVERED_CALLS))
    assert not new, (f"dataclass_from_mapping is called at {new}, whose types this file does not generate bad "
                     "inputs for: add the type (or its registry) to mapping_types() and the call to COVERED_CALLS.")
    gone = sorted(set(COVERED_CALLS) - calls)
    assert not gone, f"COVERED_CALLS names calls that are gone: {gone}; remove them."
    for target in COVERED_CALLS.values():
        if isinstance(target, type):
            assert target in TYPES
    # the package's registered types are all there, and so is each one nested in a covered type (a test that
    # registers a scratch member of a registry in this worker adds a type that is not the package's)
    def ours(types):
        return {cls for cls in types if cls.__module__.startswith("icr2_components.")}

    assert ours(store_backend(name).settings_class for name in store_backend_names()) <= set(TYPES)
    assert ours(corpus_reader_class(name).settings_class for name in corpus_format_names()) <= set(TYPES)
    assert ours(backend_kind_class(name).Settings for name in backend_kind_names()) <= set(TYPES)
    for cls in list(TYPES):
        assert set(_nested_dataclasses(cls)) <= set(TYPES)
    assert len(FIELDS) > 150


# -- what a declared type accepts, and values it does not ----------------------------------------------------------


@dataclasses.dataclass
class Accepts:
    kinds: set[str]
    literals: tuple = ()
    bounds: dict[str, float] = dataclasses.field(default_factory=dict)
    item: Accepts | None = None


def accepts(expected: Any) -> Accepts:
    """The kinds of value a declared type takes (none, bool, int, float, str, list, dict, dataclass, literal, any)."""
    origin = typing.get_origin(expected)
    args = typing.get_args(expected)
    if origin is Annotated:
        inner = accepts(args[0])
        for item in args[1:]:
            for constraint in [item, *getattr(item, "metadata", [])]:
                for bound in ("gt", "ge", "lt", "le"):
                    if getattr(constraint, bound, None) is not None:
                        inner.bounds[bound] = getattr(constraint, bound)
        return inner
    if origin in (Union, types.UnionType):
        parts = [accepts(arg) for arg in args]
        merged = Accepts(set().union(*(part.kinds for part in parts)))
        for part in parts:
            merged.bounds.update(part.bounds)
            merged.literals += part.literals
            merged.item = merged.item or part.item
        return merged
    if origin is typing.Literal:
        return Accepts({"literal"}, literals=args)
    if origin in (list, tuple, set, frozenset):
        items = [arg for arg in args if arg is not Ellipsis]
        return Accepts({"list"}, item=accepts(items[0]) if items else Accepts({"any"}))
    if origin is dict or expected is dict:
        return Accepts({"dict"})
    if expected is list:
        return Accepts({"list"}, item=Accepts({"any"}))
    if expected is type(None):
        return Accepts({"none"})
    if expected is Any:
        return Accepts({"any"})
    if dataclasses.is_dataclass(expected):
        return Accepts({"dataclass"})
    return Accepts({{bool: "bool", int: "int", float: "float", str: "str"}.get(expected, "other")})


def _numeric_text(value: str) -> bool:
    try:
        return math.isfinite(float(value)) and value.strip() == value
    except ValueError:
        return False


def _fits_kind(value: Any, kinds: set[str]) -> bool:
    """Whether a value is of a kind the declaration takes (before ranges)."""
    if "any" in kinds:
        return True
    if value is None:
        return "none" in kinds
    if isinstance(value, bool):
        return "bool" in kinds
    if isinstance(value, int):
        return bool(kinds & {"int", "float"})
    if isinstance(value, float):
        return "float" in kinds and math.isfinite(value)
    if isinstance(value, str):
        return "str" in kinds or ("float" in kinds and _numeric_text(value))
    if isinstance(value, list):
        return "list" in kinds
    if isinstance(value, dict):
        return bool(kinds & {"dict", "dataclass"})
    return False


HUGE = "9" * 5000
POOL = [None, True, False, 0, 7, -3, 10**30, 2.5, float("nan"), float("inf"), float("-inf"), "", "text", "false",
        "1e-5", HUGE, "x" * 5000, [], ["a"], [1], [None], {}, {"k": 1}, b"bytes"]


def bad_values(expected: Any) -> list[Any]:
    """Values the declaration must refuse: other kinds, NaN and infinity, out of range, a list of wrong items."""
    taken = accepts(expected)
    if "any" in taken.kinds:
        return []
    values = [value for value in POOL if not _fits_kind(value, taken.kinds)
              and not ("literal" in taken.kinds and value in taken.literals)]
    numbers = taken.kinds & {"int", "float"}
    if numbers:
        values += [float("nan"), float("inf"), float("-inf"), HUGE]
        step = 1 if "float" not in numbers else 0.5
        for bound, value in taken.bounds.items():
            values.append({"gt": value, "ge": value - step, "lt": value, "le": value + step}[bound])
    if "int" in taken.kinds and "float" not in taken.kinds:
        values += [2.5, 3.0, "3"]
    if "literal" in taken.kinds:
        values.append("not-one-of-the-choices")
    if "list" in taken.kinds and taken.item is not None and "any" not in taken.item.kinds:
        values += [[value] for value in POOL if not _fits_kind(value, taken.item.kinds)
                   and not isinstance(value, (list, dict))][:6]
        values += ["a string, not a list"] if "str" not in taken.kinds else []
    return values


def good_values(expected: Any) -> st.SearchStrategy | None:
    """Values the declaration takes as they are (None: a type generated for elsewhere, or any value)."""
    taken = accepts(expected)
    options = []
    low = taken.bounds.get("ge", taken.bounds.get("gt"))
    high = taken.bounds.get("le", taken.bounds.get("lt"))
    if "none" in taken.kinds:
        options.append(st.none())
    if "bool" in taken.kinds:
        options.append(st.booleans())
    if "int" in taken.kinds:
        options.append(st.integers(
            min_value=None if low is None else math.floor(low) + (1 if "gt" in taken.bounds else 0),
            max_value=None if high is None else math.ceil(high) - (1 if "lt" in taken.bounds else 0)))
    if "float" in taken.kinds:
        options.append(st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False,
                                 exclude_min="gt" in taken.bounds, exclude_max="lt" in taken.bounds))
    if "str" in taken.kinds:
        options.append(st.text(max_size=30))
    if "literal" in taken.kinds:
        options.append(st.sampled_from(taken.literals))
    if taken.kinds & {"dataclass", "dict", "any", "other"}:
        return None
    if "list" in taken.kinds:
        if taken.item is None or taken.item.kinds != {"str"}:
            return None
        options.append(st.lists(st.text(max_size=10), max_size=3))
    return st.one_of(options) if options else None


# -- the properties ------------------------------------------------------------------------------------------------


def _read(cls: type, values: dict[str, Any]):
    entry = TYPES[cls]
    return dataclass_from_mapping(cls, {**entry.base, **values}, f"generated.yaml: section {cls.__name__}", entry.error)


@pytest.mark.parametrize("cls, name", FIELDS, ids=[f"{_id(cls)}.{name}" for cls, name in FIELDS])
def test_a_bad_value_in_any_field_is_refused_by_name(cls, name):
    expected = field_types(cls)[name]
    candidates = bad_values(expected)
    if not candidates:
        pytest.skip(f"{cls.__name__}.{name} takes any value; only its key is checked (unknown-key test)")

    @BUDGET
    @given(st.sampled_from(candidates))
    def check(value):
        with pytest.raises(Exception) as raised:
            _read(cls, {name: value})
        assert type(raised.value) is TYPES[cls].error, f"{type(raised.value).__name__}: {raised.value}"
        message = str(raised.value)
        assert f"'{name}'" in message and "generated.yaml" in message, message
        assert "\n" not in message and len(message) < 2000, message

    check()


@pytest.mark.parametrize("cls, name", FIELDS, ids=[f"{_id(cls)}.{name}" for cls, name in FIELDS])
def test_a_good_value_comes_back_unchanged_or_is_refused_by_name(cls, name):
    strategy = good_values(field_types(cls)[name])
    if strategy is None:
        pytest.skip(f"{cls.__name__}.{name} holds a nested type, generated for on its own")

    @BUDGET
    @given(strategy)
    def check(value):
        try:
            built = _read(cls, {name: value})
        except TYPES[cls].error:
            return  # a value the type's own checks refuse (e.g. an unknown choice): refused by its error, in a line
        kept = getattr(built, name)
        assert kept == value or (isinstance(value, list) and list(kept) == value), (value, kept)
        assert type(kept) is type(value) or (isinstance(kept, float) and type(value) is int) or isinstance(
            value, list), (value, kept)

    check()


@pytest.mark.parametrize("cls, name", [(cls, name) for cls, name in FIELDS if hasattr(cls, "validate")],
                         ids=[f"{_id(cls)}.{name}" for cls, name in FIELDS if hasattr(cls, "validate")])
def test_the_checks_after_reading_refuse_only_by_the_types_error(cls, name, tmp_path, monkeypatch):
    """A value of the right type that a section's ``validate`` refuses (a path that cannot be written, a host that
    is not a URL) is refused by the section's error, never by a raw ValueError or OSError."""
    strategy = good_values(field_types(cls)[name])
    if strategy is None:
        pytest.skip(f"{cls.__name__}.{name} holds a nested type, generated for on its own")
    monkeypatch.chdir(tmp_path)  # relative paths the checks may look at are under the test's own folder

    @BUDGET
    @given(strategy)
    def check(value):
        try:
            _read(cls, {name: value}).validate()
        except TYPES[cls].error as error:
            assert "\n" not in str(error), str(error)

    check()


def _near_miss(name: str) -> str:
    return name[:-1] if len(name) > 3 else name + "x"


@pytest.mark.parametrize("cls", list(TYPES), ids=_id)
def test_an_unknown_key_is_refused_with_the_nearest_known_name(cls):
    names = [item.name for item in dataclasses.fields(cls) if item.init]

    @BUDGET
    @given(st.sampled_from(names), st.text(min_size=1, max_size=20))
    def check(name, other):
        typo = _near_miss(name)
        for key in (typo, other):
            if key in names:
                continue
            with pytest.raises(TYPES[cls].error) as raised:
                _read(cls, {key: 1})
            message = str(raised.value)
            assert "unknown key" in message and repr(key) in message, message
        if typo not in names:
            with pytest.raises(TYPES[cls].error, match="Did you mean"):
                _read(cls, {typo: 1})

    check()


@pytest.mark.parametrize("cls", list(TYPES), ids=_id)
def test_a_mapping_of_another_shape_is_refused(cls):
    @BUDGET
    @given(st.sampled_from([[1, 2], "text", 3, 2.5, True, b"x", float("nan")]))
    def check(value):
        with pytest.raises(TYPES[cls].error, match="must be a mapping"):
            dataclass_from_mapping(cls, value, "generated.yaml", TYPES[cls].error)

    check()


# -- the readers users call name the file ---------------------------------------------------------------------------


def _section_fields(section: str, settings_class: type) -> list[str]:
    return [item.name for item in dataclasses.fields(settings_class)
            if item.init and bad_values(field_types(settings_class)[item.name])
            and (section, item.name) not in (("store", "type"), ("corpus", "format"))]


INDEX_SECTIONS = [
    *(("store", {"type": name}, store_backend(name).settings_class) for name in store_backend_names()),
    *(("corpus", {"format": name, "path": "sample"}, corpus_reader_class(name).settings_class)
      for name in corpus_format_names()),
    ("embedding", {}, EmbeddingConfig),
    ("writer", {}, WriterConfig),
]


@pytest.mark.parametrize("section, base, settings_class", INDEX_SECTIONS,
                         ids=[f"{section}-{_id(cls)}" for section, _, cls in INDEX_SECTIONS])
def test_an_index_config_names_the_file_and_the_key(section, base, settings_class):
    names = _section_fields(section, settings_class)

    @READER_BUDGET
    @given(st.data())
    def check(data):
        name = data.draw(st.sampled_from(names))
        value = data.draw(st.sampled_from(bad_values(field_types(settings_class)[name])))
        config = {"store": {"type": "in_memory"}, "corpus": {"path": "sample"}, section: {**base, name: value}}
        with pytest.raises(ConfigError) as raised:
            index_config_from_dict(config, source="indexing/generated.yaml")
        message = str(raised.value)
        assert "indexing/generated.yaml" in message and name in message, message

    check()


RECIPE_SECTIONS = [("training", "TrainingOptions"), ("lora", "LoraOptions"), ("retrieval_head", "HeadOptions"),
                   ("data", "DataOptions")]


@pytest.mark.parametrize("section, class_name", RECIPE_SECTIONS)
def test_a_training_recipe_names_the_file_and_the_key(section, class_name):
    from icr2_components.training import recipe as recipes

    settings_class = getattr(recipes, class_name)
    names = [item.name for item in dataclasses.fields(settings_class)
             if bad_values(field_types(settings_class)[item.name])]

    @READER_BUDGET
    @given(st.data())
    def check(data):
        name = data.draw(st.sampled_from(names))
        value = data.draw(st.sampled_from(bad_values(field_types(settings_class)[name])))
        values = json.loads(json.dumps(RECIPE))
        values.setdefault(section, {})[name] = value
        with pytest.raises(RecipeError) as raised:
            recipe_from_dict(values, "training/generated.yaml")
        message = str(raised.value)
        assert "training/generated.yaml" in message and name in message, message

    check()


def test_a_nan_learning_rate_and_a_nan_bm25_k1_are_refused_before_any_work():
    with pytest.raises(RecipeError, match=r"training/x.yaml: section training: key 'learning_rate' is nan .*NaN"):
        recipe_from_dict({**RECIPE, "training": {"learning_rate": float("nan")}}, "training/x.yaml")
    with pytest.raises(ConfigError, match=r"of indexing/x.yaml: key 'bm25_k1' is nan .*NaN and infinity"):
        index_config_from_dict({"store": {"type": "in_memory", "bm25_k1": float("nan")}, "corpus": {"path": "sample"}},
                               source="indexing/x.yaml")
    # YAML 1.1 reads `1e-5` as a string; a float field takes it as the number it spells
    assert recipe_from_dict({**RECIPE, "training": {"learning_rate": "1e-5"}}).training.learning_rate == 1e-5


@pytest.mark.parametrize("kind", backend_kind_names())
def test_a_backend_file_names_the_file_and_the_key(kind):
    settings_class = backend_kind_class(kind).Settings
    base = {"served_model": dict(SERVED)} if kind == "served" else {}
    names = [item.name for item in dataclasses.fields(settings_class)]
    served_names = [item.name for item in dataclasses.fields(ServedModel)]

    @READER_BUDGET
    @given(st.data())
    def check(data):
        values = {"kind": kind, **json.loads(json.dumps(base))}
        if kind == "served" and data.draw(st.booleans()):
            name = data.draw(st.sampled_from(served_names))
            value = data.draw(st.sampled_from(bad_values(field_types(ServedModel)[name])))
            values["served_model"][name] = value
        else:
            name = data.draw(st.sampled_from(names))
            candidates = bad_values(field_types(settings_class)[name]) or [5, "text", [1]]
            value = data.draw(st.sampled_from(candidates))
            values[name] = value
        with pytest.raises(BackendError) as raised:
            backend_from_dict(values, "backends/generated.yaml")
        message = str(raised.value)
        assert "backends/generated.yaml" in message and name in message, message

    check()


def test_a_question_set_file_names_the_file_and_the_key(tmp_path):
    names = [item.name for item in dataclasses.fields(QuestionSetConfig)]
    (tmp_path / "questions.jsonl").write_text('{"question": "q?", "answers": ["a"]}\n')

    @READER_BUDGET
    @given(st.data())
    def check(data):
        name = data.draw(st.sampled_from(names))
        value = data.draw(st.sampled_from(bad_values(field_types(QuestionSetConfig)[name])))
        values = {"path": "questions.jsonl", name: value}
        file = tmp_path / "set.yaml"
        file.write_text(json.dumps(values, allow_nan=True).replace("NaN", ".nan").replace("-Infinity", "-.inf")
                        .replace("Infinity", ".inf") if not isinstance(value, bytes) else
                        f"path: questions.jsonl\n{name}: !!binary eA==\n")
        with pytest.raises(QuestionSetError) as raised:
            QuestionSet.from_file(file)
        message = str(raised.value)
        assert str(file) in message and name in message, message

    check()


def test_a_gate_artifact_file_names_the_file_and_the_key(tmp_path):
    names = [item.name for item in dataclasses.fields(GateArtifact)]

    @READER_BUDGET
    @given(st.data())
    def check(data):
        name = data.draw(st.sampled_from(names))
        candidates = [value for value in bad_values(field_types(GateArtifact)[name]) if not isinstance(value, bytes)]
        if not candidates:
            return
        value = data.draw(st.sampled_from(candidates))
        file = tmp_path / "gate.json"
        file.write_text(json.dumps({**ARTIFACT, name: value}))  # NaN and Infinity as Python's json writes them
        with pytest.raises(ValueError) as raised:
            GateArtifact.load(file)
        message = str(raised.value)
        assert str(file) in message and name in message, message

    check()


# -- malformed records --------------------------------------------------------------------------------------------

GOOD_ROW = {"id": "p", "title": "T", "text": "some words of a passage"}


@st.composite
def bad_lines(draw) -> bytes:
    """One line of a JSONL corpus that is not a usable record."""
    choice = draw(st.sampled_from(["not json", "not utf-8", "array", "number", "no text", "text not str",
                                   "blank text", "truncated", "nan text", "bad id"]))
    if choice == "not json":
        return draw(st.text(alphabet="{}[]:,ab\"'", min_size=1, max_size=20).filter(lambda t: not _json(t))).encode()
    if choice == "not utf-8":
        return b'{"id": "x", "text": "caf\xe9 \xff"}'
    if choice == "array":
        return json.dumps(draw(st.lists(st.integers(), max_size=3))).encode()
    if choice == "number":
        return json.dumps(draw(st.integers())).encode()
    if choice == "no text":
        return json.dumps({"id": "x", "title": "T"}).encode()
    if choice == "text not str":
        return json.dumps({"id": "x", "text": draw(st.one_of(st.integers(), st.lists(st.text(max_size=3)),
                                                             st.booleans()))}).encode()
    if choice == "blank text":
        return json.dumps({"id": "x", "text": draw(st.sampled_from(["", "   ", "\u200b\u200b", "\t\n"]))}).encode()
    if choice == "truncated":
        return b'{"id": "x", "text": "cut'
    if choice == "nan text":
        return b'{"id": "x", "text": NaN}'
    return json.dumps({"id": draw(st.sampled_from([None, "", [1], {"a": 1}, 2.5, True])), "text": "words"}).encode()


def _json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_malformed_jsonl_rows_are_skipped_by_name_and_the_good_rows_read(tmp_path):
    @READER_BUDGET
    @given(st.lists(st.tuples(st.booleans(), bad_lines()), min_size=1, max_size=8))
    def check(rows):
        lines, good = [], 0
        for number, (is_good, bad) in enumerate(rows):
            if is_good:
                good += 1
                lines.append(json.dumps({**GOOD_ROW, "id": f"p{number}"}).encode())
            else:
                lines.append(bad)
        path = tmp_path / "corpus.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        settings_ = corpus_settings_from_mapping({"format": "jsonl", "path": str(path),
                                                  "chunking": {"split_by": "none"}}, "generated.yaml")
        reader = corpus_reader(settings_)
        try:
            documents = list(reader.documents())
        except (ConfigError, UserInputError) as error:  # a file none of whose lines is a record may be refused
            assert str(path) in str(error) or "corpus" in str(error), str(error)
            return
        assert len(documents) == good, [document.content for document in documents]
        assert reader.skips.total == len(rows) - good, reader.skips.summary()

    check()


# -- component parameters: the same declarations, at __init__ and at run time ------------------------------------

NUMBER_CHECKS = [
    ("positive_int", lambda value: parameters.positive_int(value, "top_m"), PositiveInt),
    ("non_negative_int", lambda value: parameters.non_negative_int(value, "offset"), NonNegativeInt),
    ("int_between", lambda value: parameters.int_between(value, "layer", 0, 29),
     Annotated[int, Field(ge=0, le=29)]),
    ("positive_number", lambda value: parameters.positive_number(value, "temperature"), PositiveNumber),
    ("number_between", lambda value: parameters.number_between(value, "scale", 0, 1), Fraction),
    ("finite_number", lambda value: parameters.finite_number(value, "weight"), float),
]


@pytest.mark.parametrize("name, check, declared", NUMBER_CHECKS, ids=[name for name, _, _ in NUMBER_CHECKS])
def test_a_component_parameter_refuses_bools_nan_infinity_text_and_out_of_range(name, check, declared):
    @READER_BUDGET
    @given(st.sampled_from([*bad_values(declared), "0.5", "1e-5", "7"]))
    def refused(value):
        with pytest.raises(UserInputError) as raised:
            check(value)
        message = str(raised.value)
        assert message.split(" must be ")[0] in ("top_m", "offset", "layer", "temperature", "scale", "weight"), message
        assert message.endswith(f", got {value!r}.") and "\n" not in message, message

    @READER_BUDGET
    @given(good_values(declared))
    def kept(value):
        assert check(value) is value  # the value itself, never a converted copy

    refused()
    kept()


def test_a_served_reader_refuses_a_nan_or_infinite_temperature():
    from icr2_components.readers.served_chat_reader import ServedChatReader

    for value in (float("nan"), float("inf"), -0.5, True, "0"):
        with pytest.raises(UserInputError, match=r"temperature must be >= 0 \(0: greedy\), got "):
            ServedChatReader(api_base_url="http://127.0.0.1:9/v1", model="m", temperature=value)


# -- files: the error names the file and the line of the key --------------------------------------------------------

FILE_BUDGET = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _line_of(text: str, key: str, after: str) -> int:
    lines = text.splitlines()
    start = next(number for number, line in enumerate(lines) if line.startswith(f"{after}:"))
    return next(number for number, line in enumerate(lines[start:], start) if line.strip().startswith(f"{key}:")) + 1


def test_an_index_config_file_names_the_line_of_the_bad_key(tmp_path):
    from icr2_components.stores.config import load_index_config

    sections = [("store", {"type": "in_memory"}, store_backend("in_memory").settings_class),
                ("embedding", {}, EmbeddingConfig), ("writer", {}, WriterConfig)]

    @FILE_BUDGET
    @given(st.data())
    def check(data):
        section, base, settings_class = data.draw(st.sampled_from(sections))
        name = data.draw(st.sampled_from(_section_fields(section, settings_class)))
        value = data.draw(st.sampled_from(bad_values(field_types(settings_class)[name])))
        config = {"name": "generated", "corpus": {"path": "sample"}, "store": {"type": "in_memory"},
                  section: {**base, name: value}}
        file = tmp_path / "generated.yaml"
        text = yaml.safe_dump(config, sort_keys=False)
        file.write_text(text)
        with pytest.raises(ConfigError) as raised:
            load_index_config(file)
        assert f"{file}:{_line_of(text, name, section)}" in str(raised.value), str(raised.value)

    check()


def test_a_recipe_file_and_a_backend_file_name_the_line_of_the_bad_key(tmp_path):
    from icr2_components.backends.pipelines import load_backend
    from icr2_components.training.recipe import TrainingOptions, load_recipe

    names = [item.name for item in dataclasses.fields(TrainingOptions)]

    @FILE_BUDGET
    @given(st.sampled_from(names), st.data())
    def check(name, data):
        value = data.draw(st.sampled_from(bad_values(field_types(TrainingOptions)[name])))
        file = tmp_path / "recipe.yaml"
        text = yaml.safe_dump({**RECIPE, "training": {"seed": 1, name: value}}, sort_keys=False)
        file.write_text(text)
        with pytest.raises(RecipeError) as raised:
            load_recipe(file)
        assert f"{file}:{_line_of(text, name, 'training')}" in str(raised.value), str(raised.value)

    check()
    backend = tmp_path / "backend.yaml"
    backend.write_text("kind: served\ndescription: a server\nserved_modle:\n  model: m\n")
    with pytest.raises(BackendError, match=rf"in {backend}:3 \(kind: served\).*Did you mean 'served_model'"):
        load_backend(backend)


# -- ICR2 benchmark records: a bad record is skipped and counted, the others read -----------------------------------


def _icr2_record(number: int) -> dict[str, Any]:
    return {"id": f"q{number}", "query": "who wrote it?", "answers": ["someone"], "task_type": TASK_TYPES[0],
            "context": [{"passage_id": "p1", "doc_id": "d1", "text": "someone wrote it", "title": "T"}],
            "gold_passage_ids": ["p1"]}


@st.composite
def bad_icr2_records(draw) -> bytes:
    """One line of an ICR2 JSONL file that is not a usable record: a field of the wrong type, missing or
    unknown, a context item of another shape, a gold id not shown, or not JSON at all."""
    from icr2_components.kilt.icr2_benchmark import _FIELD_TYPES

    record = _icr2_record(0)
    choice = draw(st.sampled_from(["wrong type", "missing", "task", "context item", "gold", "not json"]))
    if choice == "wrong type":
        name = draw(st.sampled_from(sorted(_FIELD_TYPES)))
        candidates = [value for value in bad_values(_FIELD_TYPES[name]) if not isinstance(value, bytes)]
        record[name] = draw(st.sampled_from(candidates))
    elif choice == "missing":
        del record[draw(st.sampled_from(sorted(record)))]
    elif choice == "task":
        record["task_type"] = "not-a-task"
    elif choice == "context item":
        record["context"] = [draw(st.sampled_from([
            "a passage as text", None, {"passage_id": "p1"}, {"passage_id": ["p1"], "doc_id": "d1", "text": "t"},
            {"passage_id": {"a": 1}, "doc_id": "d1", "text": "t"}, {"passage_id": "p1", "doc_id": "d1", "text": 5}]))]
    elif choice == "gold":
        record["gold_passage_ids"] = ["not-shown"]
    else:
        return b'{"id": "q", "query": '
    return json.dumps(record).encode()


def test_malformed_icr2_records_are_skipped_by_reason_and_the_good_ones_read(tmp_path):
    from icr2_components.kilt.icr2_benchmark import read_icr2_benchmark
    from icr2_components.records import SkipReport

    @READER_BUDGET
    @given(st.lists(st.tuples(st.booleans(), bad_icr2_records()), min_size=1, max_size=6))
    def check(rows):
        lines = [json.dumps(_icr2_record(number)).encode() if good else bad
                 for number, (good, bad) in enumerate(rows)]
        path = tmp_path / "icr2.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        skips = SkipReport(source=str(path))
        read = list(read_icr2_benchmark(path, skips))
        good = sum(1 for is_good, _ in rows if is_good)
        assert [instance.id for instance in read] == [f"q{n}" for n, (is_good, _) in enumerate(rows) if is_good]
        assert skips.total == len(rows) - good, skips.summary()

    check()


# -- gate evaluation records (RetrievalQA format): each line read or skipped by name, never raised ------------------

ANY_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                        lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5),
                                                                                           children, max_size=3),
                        max_leaves=6)


def test_gate_evaluation_lines_of_any_shape_are_read_or_skipped_never_raised(tmp_path):
    from icr2_components.evaluation.gates.gate_eval import read_retrievalqa_jsonl

    fields = ["question", "ground_truth", "answers", "needs_retrieval", "param_knowledge_answerable", "context",
              "data_source"]
    good = {"question": "Who wrote it?", "ground_truth": ["someone"], "needs_retrieval": True, "context": ["text"]}

    @READER_BUDGET
    @given(st.lists(st.dictionaries(st.sampled_from(fields), ANY_JSON, max_size=4), min_size=1, max_size=5))
    def check(changes):
        lines = [json.dumps({**good, **change}) for change in changes]
        path = tmp_path / "gate.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        records, skips = read_retrievalqa_jsonl(path)
        assert len(records) + skips.total == len(lines), skips.summary()
        for record in records:  # what was read is what the line said, in its declared types
            assert isinstance(record.question, str) and record.question.strip()
            assert record.ground_truth and all(isinstance(truth, str) for truth in record.ground_truth)
            assert record.needs_retrieval in (True, False, None)

    check()


def test_a_question_set_field_mapping_of_any_shape_is_taken_as_given_or_refused_by_name(tmp_path):
    from icr2_components.kilt.question_sets import FIELDS

    data = tmp_path / "questions.jsonl"
    data.write_text('{"question": "q?", "answers": ["a"]}\n')

    @READER_BUDGET
    @given(st.dictionaries(st.sampled_from(list(FIELDS)) | st.text(max_size=6), ANY_JSON, max_size=4))
    def check(fields):
        try:
            questions = QuestionSet.from_options(data, fields=fields)
        except QuestionSetError as error:
            assert "\n" not in str(error), str(error)
            return
        for name, column in fields.items():  # taken: each field maps to the column named, or is absent
            assert getattr(questions.fields, name) == (column or None)

    check()
