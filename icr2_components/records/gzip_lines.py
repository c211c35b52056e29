"""Appendable gzip JSON lines: one gzip member per append, a cut last member found and measured, atomic rewrites.

A gzip file may hold several members one after another; every gzip reader returns their contents joined. So a
file of JSON lines can grow by appending one small member per record (a run killed while writing leaves at most
its last member cut short), and be rewritten as a few large members (``rewrite``) so that it compresses as well
as a file compressed at once: a member of one record compresses poorly, gzip's 32 KB window needs company.

:func:`read_members` reads such a file member by member, keeping every whole member and reporting a member cut
short (its byte offset and the bytes it decompressed to), where :func:`gzip.open` would raise and give nothing
more; a member that is damaged rather than cut (a wrong CRC, bytes that are not deflate) is a
:class:`GzipLinesError` naming the file and the byte offset.

Usage:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "answers.jsonl.gz"
    >>> append_member(path, b'{"a": 1}\\n'); append_member(path, b'{"a": 2}\\n')
    >>> content = read_members(path)
    >>> content.data, len(content.members), content.cut_offset
    (b'{"a": 1}\\n{"a": 2}\\n', 2, None)
"""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from icr2_components.records.reading import GZIP_MAGIC

#: bytes fed to the decompressor at a time: what is left over after a member ends is at most this much
_CHUNK = 1 << 16
#: compression level of appended and rewritten members (6: gzip's default; 9 gains little on JSON lines)
LEVEL = 6


class GzipLinesError(ValueError):
    """A gzip member that is damaged (not cut short): the message names the file and the byte offset."""


@dataclass(frozen=True)
class GzipMember:
    """One whole member: its byte range in the file, where its data starts in the joined data, its newlines."""

    start: int
    end: int
    data_start: int
    lines: int


@dataclass
class GzipContent:
    """What :func:`read_members` found.

    :param data: The decompressed bytes of every whole member, joined.
    :param members: Each whole member's :class:`GzipMember`.
    :param cut_offset: The byte offset where a member cut short starts (None: the file ends on a whole member).
    :param cut_data: What that cut member decompressed to before the file ended (b"" for none).
    """

    data: bytes
    members: list[GzipMember] = field(default_factory=list)
    cut_offset: int | None = None
    cut_data: bytes = b""


def is_gzip_file(path: str | os.PathLike) -> bool:
    """True when ``path`` starts with the gzip signature (an empty file is not gzip)."""
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def read_members(path: str | os.PathLike) -> GzipContent:
    """Read a gzip file member by member (module docstring).

    :returns: the :class:`GzipContent`; a file cut inside its last member gives that member's offset and
        partial data instead of an error.
    :raises GzipLinesError: a member is damaged (a wrong check value, not deflate data, not a gzip member).
    """
    path = Path(path)
    raw = path.read_bytes()
    view = memoryview(raw)
    parts: list[bytes] = []
    members: list[GzipMember] = []
    data_start = 0
    start = 0
    while start < len(raw):
        decompressor = zlib.decompressobj(wbits=31)
        pieces: list[bytes] = []
        position = start
        try:
            while not decompressor.eof and position < len(raw):
                chunk = view[position:position + _CHUNK]
                position += len(chunk)
                pieces.append(decompressor.decompress(chunk))
        except zlib.error as error:
            raise GzipLinesError(f"{path}: the gzip member at byte {start} is damaged ({error}); the "
                                 f"{sum(m.lines for m in members)} line(s) before it are whole. Delete the file to "
                                 "start over, or cut it at that byte to keep the lines before it.") from None
        data = b"".join(pieces)
        if not decompressor.eof:  # the file ends inside this member: a write cut short
            return GzipContent(b"".join(parts), members, cut_offset=start, cut_data=data)
        end = position - len(decompressor.unused_data)
        parts.append(data)
        members.append(GzipMember(start, end, data_start, data.count(b"\n")))
        data_start += len(data)
        start = end
    return GzipContent(b"".join(parts), members)


def append_member(path: str | os.PathLike, data: bytes) -> None:
    """Append ``data`` to ``path`` as one gzip member, flushed (the file is created if missing)."""
    member = gzip.compress(data, compresslevel=LEVEL, mtime=0)
    with open(path, "ab") as handle:
        handle.write(member)
        handle.flush()


def rewrite(path: str | os.PathLike, keep_bytes: int, data: bytes) -> None:
    """Replace ``path`` by its first ``keep_bytes`` bytes (whole members, copied as they are) followed by ``data``
    as one gzip member, atomically: the new file is written beside it and renamed over it, so a run killed
    meanwhile leaves the old file whole."""
    path = Path(path)
    with open(path, "rb") as source:
        head = source.read(keep_bytes)
    # closed by the `with handle` below; opened here so the except clause can remove it by name
    handle = tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=f".{path.name}.", delete=False)  # noqa: SIM115
    try:
        with handle:
            handle.write(head)
            if data:
                handle.write(gzip.compress(data, compresslevel=LEVEL, mtime=0))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
