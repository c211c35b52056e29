"""Finding the files the package ships by kind and name (the package's ``__init__`` names what a user calls).

:func:`resolve_file` is what every loader of a YAML, artifact or backend file uses: a path that exists as it is,
else the shipped file of that name.
"""


from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from icr2_components.errors import UserInputError

#: each kind of shipped file: its folder in the package and the suffix its names leave out
KINDS: dict[str, str] = {
    "pipelines": ".yaml",
    "backends": ".yaml",
    "indexing": ".yaml",
    "training": ".yaml",
    "artifacts": ".json",
    "questions": ".jsonl",
}


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"Unknown kind of shipped file {kind!r}; choose one of {', '.join(KINDS)}.")
    return kind


def shipped_folder(kind: str) -> Path:
    """The installed folder that holds the shipped files of ``kind``."""
    folder = files("icr2_components.resources") / _check_kind(kind)
    return Path(str(folder))


def shipped_names(kind: str) -> list[str]:
    """The names of the shipped files of ``kind``, sorted: file names without their suffix (``vanilla_rag``,
    ``kilt-sample``, ``adaptive_rag.learned``); a file in a subfolder is named with it (``icr2_table3/sft_rta``).

    :param kind: One of ``pipelines``, ``backends``, ``indexing``, ``training``, ``artifacts``, ``questions``.
    :returns: The names :func:`shipped_file` accepts.
    :raises ValueError: An unknown kind.
    """
    suffix = KINDS[_check_kind(kind)]
    folder = shipped_folder(kind)
    if not folder.is_dir():
        return []
    return sorted(
        path.relative_to(folder).as_posix()[: -len(suffix)]
        for path in folder.rglob(f"*{suffix}")
        if path.is_file()
    )


def _lookup(kind: str, name: str) -> Path | None:
    folder = shipped_folder(kind)
    name = name.strip()
    if not name or name.startswith(("/", "..")) or "\\" in name:
        return None
    root = folder.resolve()
    for candidate in (folder / (name + KINDS[kind]), folder / name):
        if candidate.is_file() and root in candidate.resolve().parents:
            return candidate
    return None


def shipped_file(kind: str, name: str) -> Path:
    """The shipped file ``name`` of ``kind`` (``shipped_file("pipelines", "adaptive_rag")``); the name may carry its
    suffix (``adaptive_rag.yaml``), and an artifact's companion file is reachable by its full name
    (``adaptive_rag.learned.npz``).

    :param kind: One of ``pipelines``, ``backends``, ``indexing``, ``training``, ``artifacts``, ``questions``.
    :param name: A name from :func:`shipped_names`.
    :returns: The file's path inside the installed package.
    :raises FileNotFoundError: No shipped file has that name; the message lists the names there are.
    :raises ValueError: An unknown kind.
    """
    found = _lookup(_check_kind(kind), str(name))
    if found is None:
        raise FileNotFoundError(
            f"No shipped {kind} file named {name!r}; shipped: {', '.join(shipped_names(kind)) or 'none'}."
        )
    return found


def is_shipped_name(kind: str, value: str | os.PathLike) -> bool:
    """Whether ``value`` names a shipped file of ``kind`` (and no file of that path exists, which would win)."""
    return not Path(value).exists() and _lookup(_check_kind(kind), os.fspath(value)) is not None


def resolve_file(kind: str, value: str | os.PathLike) -> Path:
    """``value`` as a path when a file or folder is there, else the shipped file of that name.

    A value with no folder in it (``kilt-sample``, ``adaptive_rag.learned``) that is neither raises, listing the
    shipped names; a path with a folder that does not exist is returned as it is, so the caller's own message
    ("Index config not found: ...", "Make it with ...") names what was given.

    :param kind: One of ``pipelines``, ``backends``, ``indexing``, ``training``, ``artifacts``, ``questions``.
    :param value: A path, or a name from :func:`shipped_names`.
    :returns: The path to read.
    :raises FileNotFoundError: A bare name that is neither a file here nor a shipped name.
    """
    if not isinstance(value, (str, os.PathLike)):
        raise UserInputError(f"A shipped {kind} name or a file path is needed, got {type(value).__name__} {value!r}.")
    path = Path(value)
    if path.exists():
        return path
    found = _lookup(_check_kind(kind), os.fspath(value))
    if found is not None:
        return found
    text = os.fspath(value)
    if "/" not in text and os.sep not in text:
        raise FileNotFoundError(
            f"{text!r} is neither a file (looked in {Path.cwd()}) nor a shipped {kind} name; shipped: "
            f"{', '.join(shipped_names(kind)) or 'none'}."
        )
    return path


__all__ = ["KINDS", "is_shipped_name", "resolve_file", "shipped_file", "shipped_folder", "shipped_names"]
