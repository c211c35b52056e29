"""The names the package exports: what a user composes, configures or catches, and no more.

Every package's ``__init__.py`` names its public surface in ``__all__``; helpers are imported from the module that
defines them. Read from the source (no import), so it is instant and needs no model.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[1] / "icr2_components"
#: the most public names all packages together may export
MOST_NAMES = 90


def exported(init: Path) -> list[str]:
    """The names in an ``__init__.py``'s ``__all__`` (a starred list counted name by name; none if it has none).

    :returns: the names, as written; a ``*_EXPORTS`` dict spliced in contributes its keys.
    """
    tree = ast.parse(init.read_text())
    dicts = {
        node.targets[0].id: [key.value for key in node.value.keys]
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and isinstance(node.targets[0], ast.Name)
    }
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            names: list[str] = []
            for element in node.value.elts:
                if isinstance(element, ast.Starred):
                    names += dicts[element.value.id]
                else:
                    names.append(element.value)
            return names
    return []


def every_export() -> dict[str, list[str]]:
    return {init.parent.relative_to(PACKAGE.parent).as_posix(): exported(init) for init in PACKAGE.rglob("__init__.py")}


def test_the_package_exports_at_most_90_names_and_not_the_pipeline_spec():
    exports = every_export()
    union = set().union(*exports.values())
    assert len(union) <= MOST_NAMES, sorted(union)
    assert "PipelineSpec" not in union and "PipelineSpecError" not in union
    assert {"load_pipeline", "technique_component"} <= set(exports["icr2_components"])


def test_no_package_exports_a_constant_and_no_name_is_exported_twice():
    seen: dict[str, str] = {}
    for package, names in every_export().items():
        for name in names:
            assert not (name.isupper() and len(name) > 1), f"{package} exports the constant {name}"
            if name != "resolve_model":  # the one shortcut: `from icr2_components import resolve_model`
                assert name not in seen, f"{name} is exported by {seen[name]} and {package}"
            seen[name] = package


def test_every_exported_name_is_bound_in_its_init():
    for init in PACKAGE.rglob("__init__.py"):
        tree = ast.parse(init.read_text())
        bound = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 for alias in node.names}
        bound |= {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        bound |= {target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets
                  if isinstance(target, ast.Name)}
        lazy = [name for names in [exported(init)] for name in names if name not in bound]
        if init.parent == PACKAGE:  # the top level imports its names on first use (``_EXPORTS``)
            continue
        assert not lazy, f"{init}: {lazy} in __all__ but not imported or defined there"


def test_config_error_is_one_class():
    from icr2_components import errors
    from icr2_components.corpora import settings
    from icr2_components.stores import config

    assert settings.ConfigError is config.ConfigError is errors.ConfigError
    assert issubclass(errors.ConfigError, errors.UserInputError) and issubclass(errors.ConfigError, ValueError)


def test_the_readme_layout_table_lists_every_package_as_library_or_workbench():
    readme = (PACKAGE.parent / "README.md").read_text()
    table = readme[readme.index("| floor | part | package |"):]
    rows = table[: table.index("\n\n")].splitlines()[2:]
    assert all(row.split(" | ")[1].startswith(("library", "workbench")) for row in rows), rows
    for init in sorted(PACKAGE.rglob("__init__.py")):
        parts = init.parent.relative_to(PACKAGE).parts
        if not parts:
            continue
        whole = f"`{'/'.join(parts)}/`"
        nested = [row for row in rows if f"`{parts[0]}/`" in row and f"`{parts[-1]}/`" in row]
        assert whole in table or nested, f"{'/'.join(parts)}/ is not in the README's layout table"
