"""Files the package writes and reads back prove they are whole: a content hash written with them, checked on load,
written through a temporary file that is synced and renamed (a kill leaves the old file or the new one, never half
of one), and appends that always start on a fresh line.

Usage:
    >>> write_sealed_json("run/checkpoint.json", {"position": 500})
    >>> read_sealed_json("run/checkpoint.json", what="checkpoint")["position"]
    500
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

SEAL_KEY = "sha256"


class DamagedFileError(ValueError):
    """A file the package wrote does not match the hash or counts written with it; the message names the file and
    what disagrees."""


def content_sha256(data: Mapping[str, Any]) -> str:
    """The SHA-256 of ``data`` without its seal, as canonical JSON (sorted keys, no spaces)."""
    payload = {key: value for key, value in data.items() if key != SEAL_KEY}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sealed(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with its content hash under ``"sha256"``."""
    return {**{key: value for key, value in data.items() if key != SEAL_KEY}, SEAL_KEY: content_sha256(data)}


def check_seal(data: Any, path: str | os.PathLike, what: str) -> dict[str, Any]:
    """``data`` (read from ``path``) when its seal matches its content; :class:`DamagedFileError` otherwise."""
    if not isinstance(data, dict):
        raise DamagedFileError(f"The {what} {path} is not a JSON object; it was not written by this package whole.")
    recorded = data.get(SEAL_KEY)
    if recorded is None:
        raise DamagedFileError(f"The {what} {path} carries no content hash ('{SEAL_KEY}'): it was edited or written "
                               "by something else.")
    actual = content_sha256(data)
    if recorded != actual:
        raise DamagedFileError(
            f"The {what} {path} does not match the content hash written with it (recorded {recorded[:12]}..., "
            f"content {actual[:12]}...): it was edited or damaged after it was written."
        )
    return data


def atomic_write_bytes(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> None:
    """Write ``path`` through a temporary file in its folder, synced, then renamed over it (and the folder synced):
    a kill at any moment leaves the previous file or the new one. The temporary file never outlives a failure."""
    path = Path(path)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            # mkstemp's file is private (0600): give it what a plain open() would, or the replaced file's mode
            os.fchmod(stream.fileno(), path.stat().st_mode & 0o777 if path.exists() else 0o644)
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform without directory descriptors
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def write_sealed_json(path: str | os.PathLike, data: Mapping[str, Any], indent: int | None = 1) -> dict[str, Any]:
    """Write ``data`` with its content hash, atomically (:func:`atomic_write_bytes`); returns what was written."""
    record = sealed(data)
    text = json.dumps(record, indent=indent, ensure_ascii=False, default=str)
    atomic_write_bytes(path, lambda stream: stream.write(text.encode("utf-8")))
    return record


def read_sealed_json(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """Read a file :func:`write_sealed_json` wrote; :class:`DamagedFileError` names the file when it is not whole."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DamagedFileError(f"The {what} {path} is not whole JSON ({error}).") from error
    return check_seal(data, path, what)


def open_for_append(path: str | os.PathLike) -> IO[str]:
    """Open a JSON-lines file to append to, its folder made first; when the last line was cut (no final newline, a
    kill mid-write), a newline is written first, so the next record starts on a line of its own."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ends_cut = False
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as reader:
            reader.seek(-1, os.SEEK_END)
            ends_cut = reader.read(1) != b"\n"
    handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - returned open, the caller closes it
    if ends_cut:
        handle.write("\n")
        handle.flush()
    return handle
