"""The package's floors (../shared/DESIGN.md, README "Layout"): every import points down or along the ground floor.

1. Ground floor: models, kilt, stores, records, text, artifacts, testing (helpers for tests and benches) and the neutral
   top-level modules.
2. Components, all siblings: builders, gates, filters (head probing included), rankers, readers, reorderers,
   retrievers. None imports another component package, evaluation/, serving/ or anything above.
3. training/, evaluation/: use components, never used by them, and not each other.
4. serving/, commands/, cli.py.

What counts as an import: every ``import`` statement (those inside functions and ``TYPE_CHECKING`` blocks too: a
lazy import is still a dependency) and every module loaded by name (``importlib.import_module``, ``__import__``).
A name built at run time is read as far as it can be: a string, an f-string's leading text, ``__name__`` and
``__package__``; a load whose package cannot be read is a violation unless ``LOADS_BY_DATA`` names it with its
reason. The tests at the end plant one violation of each kind in a copy of the package and show the check fails.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "icr2_components"
ROOT_NAME = "icr2_components"

GROUND = {
    "models",
    "kilt",
    "corpora",
    "stores",
    "records",
    "text",
    "artifacts",
    "resources",
    "_environment",
    "extras",
    "errors",
    "paths",
    "preflight",
    "plotting",
    "retrying",
    "concurrency",
    "strict_mapping",
    "parameters",
    "pipeline_loading",
    "pipeline_spec",
    "technique_component",
    "pipeline_pairs",
    "registry",
    "backends",
    "testing",
    "__init__",
}
COMPONENTS = {"builders", "gates", "filters", "rankers", "readers", "reorderers", "retrievers"}
USERS_OF_COMPONENTS = {"training", "evaluation"}
THIN_TOP = {"serving", "commands", "cli"}
FLOOR = {**{name: 1 for name in GROUND}, **{name: 2 for name in COMPONENTS},
         **{name: 3 for name in USERS_OF_COMPONENTS}, **{name: 4 for name in THIN_TOP}}
SIBLINGS_APART = {2, 3}  # floors whose packages may not import each other

# Loads whose module name comes from data, not code: file (relative to the package) -> why it is allowed.
LOADS_BY_DATA = {
    "__init__.py": "the package's lazy exports (load_pipeline, resolve_model...): each name's module, written in "
    "_EXPORTS beside it, is imported on first use so that `import icr2_components` stays light",
    "retrievers/index_retriever.py": "imports the Haystack retrievers of the document store the user passed "
    "(Haystack's in-memory or elasticsearch-haystack's module, by the store's type), never a module of this package",
    "backends/pipelines.py": "imports the component class a pipeline file names (under icr2_components. or haystack "
    "only) to ask what it needs, as Haystack's own loader does when it builds that pipeline",
}

LOADERS = {"import_module", "__import__"}


def unit_of(path: Path, package: Path = PACKAGE) -> str:
    """The package (or top-level module) a file belongs to: ``readers``, ``cli``, ``paths``..."""
    relative = path.relative_to(package)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def _own_module(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([ROOT_NAME, *parts])


def _loaded_name(node: ast.Call, path: Path, package: Path) -> str | None:
    """The module name an ``import_module(...)`` / ``__import__(...)`` call loads, as far as the code says it.

    Returns the full name, the package prefix of an f-string (up to its last dot before the first run-time part),
    or None when nothing of it can be read.
    """
    if not node.args:
        return None
    arg = node.args[0]
    own = _own_module(path, package)
    own_package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.Name) and arg.id in ("__name__", "__package__"):
        return own if arg.id == "__name__" else own_package
    if isinstance(arg, ast.JoinedStr):
        text = ""
        for part in arg.values:
            if isinstance(part, ast.Constant):
                text += str(part.value)
            elif isinstance(part.value, ast.Name) and part.value.id == "__name__":
                text += own
            elif isinstance(part.value, ast.Name) and part.value.id == "__package__":
                text += own_package
            else:
                return text.rpartition(".")[0] or None
        return text
    return None


def imported_units(path: Path, source: str | None = None, package: Path = PACKAGE) -> set[tuple[str, int]]:
    """(unit, line) for every import of our package in the file, relative imports and loads by name resolved.

    A load by name the walk cannot read gives the unit ``"?"``.
    """
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    own_parts = path.relative_to(package).parts[:-1]
    found = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(own_parts[: len(own_parts) - (node.level - 1)])
                module = ".".join([ROOT_NAME, *base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names = [module]
            if module == ROOT_NAME:  # `from icr2_components import readers`
                names = [f"{ROOT_NAME}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if called in LOADERS:
                loaded = _loaded_name(node, path, package)
                if loaded is None:
                    found.add(("?", node.lineno))
                names = [loaded] if loaded else []
        for name in names:
            parts = name.split(".")
            if parts[0] == ROOT_NAME and len(parts) > 1:
                found.add((parts[1], node.lineno))
    return found


def all_modules(package: Path = PACKAGE) -> list[Path]:
    return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)


def unplaced_units(package: Path = PACKAGE) -> list[str]:
    return sorted({unit_of(p, package) for p in all_modules(package)} - set(FLOOR))


def violations(path: Path, package: Path = PACKAGE) -> list[str]:
    """What in one file breaks the floors, one line each."""
    unit = unit_of(path, package)
    floor = FLOOR.get(unit)
    if floor is None:
        return [f"{unit} has no floor"]
    relative = str(path.relative_to(package))
    wrong = []
    for target, line in sorted(imported_units(path, package=package)):
        if target == "?":
            if relative not in LOADS_BY_DATA:
                wrong.append(f"line {line}: loads a module by a name the floors check cannot read")
            continue
        if target == unit or target not in FLOOR:
            continue
        if FLOOR[target] > floor:
            wrong.append(f"line {line}: {unit} (floor {floor}) imports {target} (floor {FLOOR[target]})")
        elif floor in SIBLINGS_APART and FLOOR[target] == floor:
            wrong.append(f"line {line}: {unit} imports its sibling {target} (floor {floor})")
    return wrong


@pytest.mark.unit
def test_every_package_has_a_floor():
    """A new package must be placed on a floor here (and in the README), not slip past the check."""
    unplaced = unplaced_units()
    assert not unplaced, f"place these in a floor in tests/test_layout_floors.py and the README layout: {unplaced}"


@pytest.mark.parametrize("path", all_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
@pytest.mark.unit
def test_imports_point_down_or_along_the_ground_floor(path: Path):
    wrong = violations(path)
    assert not wrong, f"{path.relative_to(PACKAGE)}:\n" + "\n".join(wrong)


@pytest.mark.unit
def test_loads_by_data_are_still_there():
    """An allowance for a load by name is removed with the load (no stale exception keeps a door open)."""
    for relative in LOADS_BY_DATA:
        assert "?" in {target for target, _ in imported_units(PACKAGE / relative)}, relative


@pytest.mark.unit
def test_the_walk_sees_lazy_relative_and_by_name_imports():
    """The checker itself: a lazy import, a relative import and each form of load by name are found."""
    source = ("import importlib\nfrom ..filters import passage_scoring\n\ndef f(name):\n"
              "    from icr2_components.evaluation import bcu\n"
              "    importlib.import_module('icr2_components.training.sft')\n"
              "    importlib.import_module(f'icr2_components.serving.{name}')\n"
              "    importlib.import_module(f'{__name__}.{name}')\n"
              "    __import__(name)\n")
    found = {t for t, _ in imported_units(PACKAGE / "readers" / "any.py", source)}
    assert found == {"filters", "evaluation", "training", "serving", "readers", "?"}


# --- no import circles, inside a floor either --------------------------------------------------------------------


def module_name(path: Path, package: Path = PACKAGE) -> str:
    return _own_module(path, package)


def imported_modules(path: Path, package: Path = PACKAGE, known: set[str] | None = None) -> set[str]:
    """The package's modules a file imports (lazy and ``TYPE_CHECKING`` imports too): ``from a.b import c`` counts
    as an import of ``a.b.c`` when that is a module, else of ``a.b``. A package's own ``__init__`` is not counted
    as imported by the modules inside it (Python runs it first anyway)."""
    known = known if known is not None else {module_name(p, package) for p in all_modules(package)}
    own = module_name(path, package)
    own_parts = path.relative_to(package).parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(own_parts[: len(own_parts) - (node.level - 1)])
                module = ".".join([ROOT_NAME, *base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            submodules = [f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in known]
            names = submodules if len(submodules) == len(node.names) else [module, *submodules]
        for name in names:
            if name in known and name != own and not own.startswith(name + "."):
                found.add(name)
    return found


def import_cycles(package: Path = PACKAGE) -> list[list[str]]:
    """Every group of the package's modules that import each other round in a circle (strongly connected)."""
    paths = all_modules(package)
    known = {module_name(p, package) for p in paths}
    graph = {module_name(p, package): sorted(imported_modules(p, package, known)) for p in paths}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    for root in sorted(graph):  # Tarjan's algorithm, iteratively (no recursion limit on a deep package)
        if root in order:
            continue
        work = [(root, iter(graph[root]))]
        order[root] = low[root] = len(order)
        stack.append(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in order:
                    order[target] = low[target] = len(order)
                    stack.append(target)
                    work.append((target, iter(graph[target])))
                elif target in stack:
                    low[node] = min(low[node], order[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == order[node]:
                group = []
                while True:
                    member = stack.pop()
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return sorted(cycles)


def test_no_import_circles_inside_the_package():
    """Two modules that import each other (lazily or for type hints too) cannot be read, tested or moved apart:
    what both need belongs in a lower module (``models/file_lock.py``, ``stores/store_types.py``,
    ``stores/elasticsearch/settings.py``, a ``Protocol`` of what one asks of the other)."""
    cycles = import_cycles()
    assert not cycles, "modules importing each other in a circle:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.unit
def test_a_planted_import_circle_is_found(package_copy: Path):
    planted = package_copy / "kilt" / "planted_circle.py"
    planted.write_text("def f():\n    from icr2_components.kilt import planted_other\n")
    other = package_copy / "kilt" / "planted_other.py"
    other.write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                     "    from icr2_components.kilt.planted_circle import f\n")
    try:
        found = import_cycles(package_copy)
    finally:
        planted.unlink()
        other.unlink()
    assert ["icr2_components.kilt.planted_circle", "icr2_components.kilt.planted_other"] in found, found


# --- planted violations: each kind, in a copy of the real package, makes the check fail -------------------------

PLANTS = {
    "an import up a floor": (
        "models/planted.py",
        "from icr2_components.readers import LocalChatReader\n",
        "models (floor 1) imports readers (floor 2)",
    ),
    "a lazy import up a floor": (
        "kilt/planted.py",
        "def f():\n    from icr2_components.evaluation.metrics import bcu\n",
        "kilt (floor 1) imports evaluation (floor 3)",
    ),
    "a relative import of a sibling component": (
        "gates/planted.py",
        "from ..readers import LocalChatReader\n",
        "gates imports its sibling readers (floor 2)",
    ),
    "training importing evaluation": (
        "training/planted.py",
        "from icr2_components.evaluation.statistics import intervals\n",
        "training imports its sibling evaluation (floor 3)",
    ),
    "evaluation importing training": (
        "evaluation/planted.py",
        "import icr2_components.training.sft\n",
        "evaluation imports its sibling training (floor 3)",
    ),
    "a literal load by name up a floor": (
        "stores/planted.py",
        "import importlib\nimportlib.import_module('icr2_components.commands.index')\n",
        "stores (floor 1) imports commands (floor 4)",
    ),
    "an f-string load of a sibling": (
        "readers/planted.py",
        "import importlib\n\ndef f(n):\n    return importlib.import_module(f'icr2_components.gates.{n}')\n",
        "readers imports its sibling gates (floor 2)",
    ),
    "a load by a name nobody can read": (
        "filters/planted.py",
        "import importlib\n\ndef f(n):\n    return importlib.import_module(n)\n",
        "loads a module by a name the floors check cannot read",
    ),
}


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("layout") / ROOT_NAME
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _all_violations(package: Path) -> list[str]:
    return [f"{p.relative_to(package)}: {v}" for p in all_modules(package) for v in violations(p, package)]


@pytest.mark.parametrize("kind", sorted(PLANTS))
@pytest.mark.unit
def test_a_planted_violation_fails_the_check(kind: str, package_copy: Path):
    relative, source, expected = PLANTS[kind]
    assert _all_violations(package_copy) == []  # the copy is clean before the plant
    planted = package_copy / relative
    planted.write_text(source)
    try:
        found = _all_violations(package_copy)
    finally:
        planted.unlink()
    assert len(found) == 1 and found[0].startswith(relative) and expected in found[0], found


@pytest.mark.unit
def test_a_package_of_its_own_for_probing_fails_the_check(package_copy: Path):
    """Head probing has no floor of its own (DESIGN: it belongs with the filters): a top-level probing/ is unplaced."""
    folder = package_copy / "probing"
    folder.mkdir()
    (folder / "__init__.py").write_text('"""Probing."""\n')
    try:
        assert unplaced_units(package_copy) == ["probing"]
    finally:
        shutil.rmtree(folder)
    assert unplaced_units(package_copy) == []
