"""The package's floors (README "Layout"): every import points down or along the ground floor.

1. Ground floor: models, kilt, stores, records, text, artifacts and the neutral top-level modules.
2. Components, all siblings: none imports another component package, evaluation/, serving/ or anything above.
3. training/, evaluation/, probing/: use components, never used by them.
4. serving/, commands/, cli.py.

The walk reads every ``import`` statement (those inside functions too: a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "icr2_components"

GROUND = {"models", "kilt", "stores", "records", "text", "artifacts", "_environment", "errors", "paths", "plotting",
          "strict_mapping", "pipeline_loading", "pipeline_spec", "pipeline_pairs", "registry", "backends", "__init__"}
COMPONENTS = {"builders", "gates", "filters", "rankers", "readers", "reorderers", "retrievers"}
USERS_OF_COMPONENTS = {"training", "evaluation", "probing"}
THIN_TOP = {"serving", "commands", "cli"}
FLOOR = {**{name: 1 for name in GROUND}, **{name: 2 for name in COMPONENTS},
         **{name: 3 for name in USERS_OF_COMPONENTS}, **{name: 4 for name in THIN_TOP}}


def unit_of(path: Path) -> str:
    """The package (or top-level module) a file belongs to: ``readers``, ``cli``, ``paths``..."""
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def imported_units(path: Path, source: str | None = None) -> set[tuple[str, int]]:
    """(unit, line) for every import of our package in the file, relative imports resolved."""
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    own_parts = path.relative_to(PACKAGE).parts[:-1]
    found = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(own_parts[: len(own_parts) - (node.level - 1)])
                module = ".".join(["icr2_components", *base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names = [module]
            if module == "icr2_components":  # `from icr2_components import readers`
                names = [f"icr2_components.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "icr2_components" and len(parts) > 1:
                found.add((parts[1], node.lineno))
    return found


def all_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_package_has_a_floor():
    """A new package must be placed on a floor here (and in the README), not slip past the check."""
    unplaced = sorted({unit_of(p) for p in all_modules()} - set(FLOOR))
    assert not unplaced, f"place these in a floor in tests/test_layout_floors.py and the README layout: {unplaced}"


@pytest.mark.parametrize("path", all_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_or_along_the_ground_floor(path: Path):
    unit = unit_of(path)
    floor = FLOOR.get(unit)
    if floor is None:
        pytest.fail(f"{unit} has no floor")
    wrong = []
    for target, line in sorted(imported_units(path)):
        if target == unit or target not in FLOOR:
            continue
        if FLOOR[target] > floor:
            wrong.append(f"line {line}: {unit} (floor {floor}) imports {target} (floor {FLOOR[target]})")
        elif floor == 2 and FLOOR[target] == 2:
            wrong.append(f"line {line}: component package {unit} imports its sibling {target}")
    assert not wrong, f"{path.relative_to(PACKAGE)}:\n" + "\n".join(wrong)


def test_the_walk_sees_lazy_and_relative_imports():
    """The checker itself: an import inside a function and a relative import are both found."""
    source = "from ..filters import passage_scoring\n\ndef f():\n    from icr2_components.evaluation import bcu\n"
    assert {t for t, _ in imported_units(PACKAGE / "readers" / "any.py", source)} == {"filters", "evaluation"}
