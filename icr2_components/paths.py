"""Where the package keeps what it makes: converted models, the sample corpus, index manifests, checkpoints."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path


def cache_dir() -> Path:
    """The directory where converted bundled models live (``ICR2_CACHE_DIR`` overrides it)."""
    root = os.environ.get("ICR2_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "icr2_components")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


#: filesystems that hold no data files: the kernel's views (a file there is made up as it is read, a write there
#: changes the kernel's settings or fails), device nodes and pseudo-terminals
VIRTUAL_FILESYSTEMS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "pstore", "bpf",
    "configfs", "fusectl", "mqueue", "binfmt_misc", "efivarfs", "autofs", "rpc_pipefs", "nsfs", "hugetlbfs",
})
#: where a path is on a virtual filesystem whatever the mount table says (a system without /proc/self/mounts)
_VIRTUAL_ROOTS = ("/proc", "/sys")
#: a special file an output may name: writing there is throwing away, on purpose
_DISCARD = "/dev/null"


def _mounts() -> list[tuple[str, str]]:
    """``(mount point, filesystem type)`` of every mount (Linux), longest mount point first; [] elsewhere."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 3:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[1])
            mounts.append((point, parts[2]))
    return sorted(mounts, key=lambda m: len(m[0]), reverse=True)


def virtual_filesystem(path: str | os.PathLike) -> str | None:
    """The type of the virtual filesystem ``path`` (resolved, links followed) is on (``proc``, ``sysfs``, ...),
    or None for a filesystem that holds files."""
    real = os.path.realpath(os.fspath(Path(path).expanduser()))
    for point, kind in _mounts():
        if real == point or real.startswith(point.rstrip("/") + "/"):
            if kind in VIRTUAL_FILESYSTEMS:
                return kind
            break
    for root in _VIRTUAL_ROOTS:
        if real == root or real.startswith(root + "/"):
            return root.strip("/")
    return None


def special_file_kind(path: str | os.PathLike) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder (links followed): ``a FIFO``,
    ``a socket``, ``a character device``, ``a block device``, ``a link to nothing``; else None. Opening a FIFO
    for reading waits for a writer: a check before it is the only way not to hang."""
    path = Path(path).expanduser()
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a link to nothing" if os.path.islink(path) else None
    except OSError:
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return None


def output_file_problem(path: str | os.PathLike) -> str | None:
    """Why a file cannot be written at ``path``, or None: it is a directory, a FIFO, socket or device (but
    /dev/null), on a virtual filesystem (/proc, /sys), a folder above it is a file, or the deepest folder above it
    that exists cannot be written into. Checked before a long job starts, so that it fails in a line instead of
    after its work (nothing is created here)."""
    target = Path(path).expanduser()
    if os.path.realpath(target) == _DISCARD:
        return None
    if target.is_dir():
        return f"{target} is a directory, not a file"
    kind = special_file_kind(target)
    if kind is not None:
        return f"{target} is {kind}, not a regular file"
    virtual = virtual_filesystem(target)
    if virtual is not None:
        return f"{target} is on the {virtual} virtual filesystem, where no data file can be written"
    if target.exists() and not os.access(target, os.W_OK):
        return f"{target} exists and cannot be written (permissions)"
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
        kind = special_file_kind(target)
        return f"{target} is {kind or 'a file'}, not a folder"
    virtual = virtual_filesystem(target)
    if virtual is not None:
        return f"{target} is on the {virtual} virtual filesystem, where no data file can be written"
    if target.is_dir():
        return None if os.access(target, os.W_OK | os.X_OK) else f"the folder {target} cannot be written into"
    return output_file_problem(target)


def input_path_problem(path: str | os.PathLike, *, folder: bool | None = None) -> str | None:
    """Why ``path`` cannot be read as data, or None: missing, a FIFO, socket or device (reading one would wait or
    never end), on a virtual filesystem (/proc, /sys), unreadable (permissions); with ``folder`` True it must be a
    folder, False a file, None either."""
    target = Path(path).expanduser()
    kind = special_file_kind(target)
    if kind is not None:
        return f"{target} is {kind}, not a regular file"
    if not target.exists():
        return f"{target} does not exist"
    if folder is False and target.is_dir():
        return f"{target} is a directory, not a file"
    if folder is True and not target.is_dir():
        return f"{target} is a file, not a folder"
    virtual = virtual_filesystem(target)
    if virtual is not None:
        return f"{target} is on the {virtual} virtual filesystem, which holds no data files"
    if not os.access(target, os.R_OK | (os.X_OK if target.is_dir() else 0)):
        return f"{target} cannot be read (permissions)"
    return None


def input_file_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be read as a data file, or None (:func:`input_path_problem` for a file)."""
    return input_path_problem(path, folder=False)


def text_file_problem(path: str | os.PathLike, sniff: int = 65536) -> str | None:
    """Why ``path`` cannot be read as a UTF-8 text file, or None: :func:`input_file_problem`, or its first
    ``sniff`` bytes hold a NUL byte or bytes that are not UTF-8 (a binary file)."""
    problem = input_file_problem(path)
    if problem is not None:
        return problem
    with open(Path(path).expanduser(), "rb") as handle:
        head = handle.read(sniff)
    nul = head.find(b"\0")
    if nul >= 0:
        return f"{path} is a binary file (a NUL byte at byte {nul}), not text"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(head) - 4:  # not a character cut by the sniff's end
            return f"{path} is not UTF-8 text (byte {error.start} is 0x{head[error.start]:02x})"
    return None


def folder_entry_problem(path: Path, relative: str) -> tuple[str, str] | None:
    """Why a file found in a corpus folder is not read, as ``(reason, detail)`` for a skip report, or None: its
    name is not UTF-8 (an id made of it could not be stored), or it is a FIFO, socket, device or broken link."""
    try:
        relative.encode("utf-8")
    except UnicodeEncodeError:
        shown = relative.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return "file name is not UTF-8", f"{shown}: rename the file (its name becomes the passages' ids)"
    kind = special_file_kind(path)
    if kind is not None:
        return "not a regular file", f"{relative}: {kind}"
    return None
