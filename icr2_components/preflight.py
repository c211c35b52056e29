"""Checks of what a command is given, made before any work starts: the paths it reads and writes, and the device
it is asked to run on. Each failure is one :class:`InputPathError` line naming the option, the path or device,
what is wrong and what to do, so that a run fails in its first second instead of hanging on a FIFO, writing into
/proc or crashing after its work.

The path rules are :mod:`icr2_components.paths`' (``*_problem``); this module turns them into errors and adds
the device check, and says where a run's skip file goes (:func:`run_skip_file_path`).

Usage (in a command's ``run``):
    >>> from icr2_components.preflight import check_input, check_output_folder, check_device
    >>> check_input(args.dataset, "--dataset")
    >>> check_output_folder(args.out, "--out")
    >>> check_device(args.device, "--device")
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from icr2_components.errors import UserInputError
from icr2_components.paths import (
    cache_dir,
    input_path_problem,
    output_file_problem,
    output_folder_problem,
    special_file_kind,
    text_file_problem,
)


class InputPathError(UserInputError):
    """A path or device given to a command cannot be used; the message names the option, the value and what to do."""


def _fail(option: str, problem: str, what_to_do: str) -> None:
    raise InputPathError(f"{option}: {problem}; {what_to_do}.")


def check_input(path: str | os.PathLike | None, option: str, *, folder: bool | None = None,
                how_to_make: str | None = None) -> None:
    """Refuse an input that is missing, a FIFO, socket or device, on /proc or /sys, or unreadable (``folder``:
    True a folder, False a file, None either). None passes (the option was not given). ``how_to_make``: what makes
    such an input (a command), said beside what to give."""
    if path is None:
        return
    problem = input_path_problem(path, folder=folder)
    if problem is not None:
        wanted = {True: "a folder", False: "a regular file"}.get(folder, "a regular file or folder")
        _fail(option, problem, f"give {wanted} that can be read" + (f" ({how_to_make})" if how_to_make else ""))


def check_input_if_present(path: str | os.PathLike | None, option: str) -> None:
    """For an option that takes a shipped name or a path: refuse only a path that exists and is not a regular file
    or folder (a FIFO, a device), or is on /proc or /sys; a name is left to the command to resolve."""
    if path is None:
        return
    target = Path(path).expanduser()
    if special_file_kind(target) is not None or target.exists():
        check_input(target, option)


def check_text_file(path: str | os.PathLike | None, option: str) -> None:
    """Refuse a file that :func:`check_input` refuses, or that is binary or not UTF-8 (a list of ids)."""
    if path is None:
        return
    problem = text_file_problem(path)
    if problem is not None:
        _fail(option, problem, "give a UTF-8 text file")


def check_output_file(path: str | os.PathLike | None, option: str) -> None:
    """Refuse an output file that cannot be written: a folder, a FIFO or device, on /proc or /sys, a file on its
    way, no permission."""
    if path is None:
        return
    problem = output_file_problem(path)
    if problem is not None:
        _fail(option, problem, "give a file path that can be written")


def check_output_folder(path: str | os.PathLike | None, option: str) -> None:
    """Refuse an output folder that cannot be made or written: an existing file, a FIFO, on /proc or /sys, no
    permission."""
    if path is None:
        return
    problem = output_folder_problem(path)
    if problem is not None:
        _fail(option, problem, "give a folder that can be created or written")


def available_devices() -> list[str]:
    """The devices torch can use here: ``cpu``, then ``cuda:0``... and ``mps`` where present."""
    devices = ["cpu"]
    try:
        import torch
    except ImportError:
        return devices
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def device_problem(device: Any) -> str | None:
    """Why ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``mps``; None: the best available) cannot be used on this
    machine, or None."""
    if device is None or device == "cpu":
        return None
    if not isinstance(device, str):
        return f"device {device!r} is not a device name (cpu, cuda, cuda:N, mps)"
    available = available_devices()
    if device == "cuda":
        wanted = "cuda:0"
    elif device.startswith("cuda:") and device[5:].isdigit():
        wanted = f"cuda:{int(device[5:])}"
    else:
        wanted = device
    if wanted in available:
        return None
    return f"device {device} is not available on this machine (available: {', '.join(available)})"


def check_device(device: Any, option: str = "device") -> None:
    """Refuse a device this machine does not have (CUDA asked for on a machine without it), naming the ones it
    has."""
    problem = device_problem(device)
    if problem is not None:
        _fail(option, problem, "choose one of those, or leave it out for the best available")


#: options whose value is a folder a command writes its results into, first found first used
_OUTPUT_FOLDERS = ("out", "out_dir", "output_dir")
#: options whose value is a file a command writes (its skip file goes beside it)
_OUTPUT_FILES = ("report", "output", "summary", "out")


def run_skip_file_path(command: str, args: Any) -> Path:
    """Where a command's run writes its skip file (every input it skipped, one JSON line each): ``skips.jsonl`` in
    its output folder; else beside its output file (``report.json`` -> ``report.skips.jsonl``); else under the
    cache root, ``skips/<command>-<time>.jsonl``."""
    for name in _OUTPUT_FOLDERS:
        value = getattr(args, name, None)
        if (isinstance(value, str) and value and (Path(value).expanduser().is_dir() or not Path(value).suffix)
                and output_folder_problem(value) is None):
            return Path(value).expanduser() / "skips.jsonl"
    for name in _OUTPUT_FILES:
        value = getattr(args, name, None)
        if isinstance(value, str) and value and Path(value).suffix:
            target = Path(value).expanduser()
            beside = target.with_name(f"{target.stem}.skips.jsonl")
            if output_file_problem(target) is None and output_file_problem(beside) is None:
                return beside
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return cache_dir() / "skips" / f"{command}-{stamp}-{os.getpid()}.jsonl"


__all__ = [
    "InputPathError",
    "available_devices",
    "check_device",
    "check_input",
    "check_input_if_present",
    "check_output_file",
    "check_output_folder",
    "check_text_file",
    "device_problem",
    "run_skip_file_path",
]
