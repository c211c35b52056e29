"""Where the package keeps what it makes: converted models, the sample corpus, index manifests, checkpoints."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The directory where converted bundled models live (``ICR2_CACHE_DIR`` overrides it)."""
    root = os.environ.get("ICR2_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "icr2_components")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def output_file_problem(path: str | os.PathLike) -> str | None:
    """Why a file cannot be written at ``path``, or None: it is a directory, a folder above it is a file, or the
    deepest folder above it that exists cannot be written into. Checked before a long job starts, so that it
    fails in a line instead of after its work (nothing is created here)."""
    target = Path(path).expanduser()
    if target.is_dir():
        return f"{target} is a directory, not a file"
    parent = target.parent
    while not parent.exists():
        if parent.parent == parent:
            break
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        return f"{parent} is a file, so no folder can be made under it for {target}"
    if parent.exists() and not os.access(parent, os.W_OK | os.X_OK):
        return f"the folder {parent} cannot be written into (permissions), so {target} cannot be created"
    return None


def output_folder_problem(path: str | os.PathLike) -> str | None:
    """Why a folder cannot be made or written at ``path``, or None (the same checks as
    :func:`output_file_problem`, for a folder: an existing file there is the problem)."""
    target = Path(path).expanduser()
    if target.exists() and not target.is_dir():
        return f"{target} is a file, not a folder"
    if target.is_dir():
        return None if os.access(target, os.W_OK | os.X_OK) else f"the folder {target} cannot be written into"
    return output_file_problem(target)


def input_file_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be read as a data file, or None: missing, or a directory."""
    target = Path(path).expanduser()
    if not target.exists():
        return f"{target} does not exist"
    if target.is_dir():
        return f"{target} is a directory, not a file"
    return None
