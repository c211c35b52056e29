"""``corpus.format: folder``: the ``.txt``, ``.md``, ``.html`` and ``.pdf`` files under a folder, each read by
Haystack's own converter (``TextFileToDocument``, ``MarkdownToDocument``, ``HTMLToDocument``,
``PyPDFToDocument``) and cut into passages by Haystack's ``DocumentSplitter`` (``corpus.chunking``; default 100
words, no overlap).

Files are read in sorted order of their path relative to the folder, which is each passage's ``file_path`` meta
and the stem of its id (``library/json.html-word100o0-00003``); ``title`` is the HTML ``<title>``, the first
Markdown heading, the PDF's title, or the file's name. ``include`` and ``exclude`` are shell patterns matched
against that relative path, where ``*`` also crosses folders (``library/*`` is everything under ``library``).
Counted, named and skipped: a file the converter cannot read (``unreadable or corrupt file``, with the
converter's reason: a damaged PDF, bytes that are not UTF-8 in a text file, no permission), a file with no text
(``empty text``: empty, blank, or markup without text, whichever converter reads it), a file whose extension no
converter reads (``unsupported file type``), a file whose name is not UTF-8 (``file name is not UTF-8``: its
name would be the passages' ids) and a FIFO, socket, device or broken link (``not a regular file``). HTML, Markdown and
PDF need the ``formats`` extra (trafilatura, markdown-it-py and mdit_plain, pypdf).

Usage (``indexing/*.yaml``; ``scripts/python_docs.sh`` unpacks the Python documentation this reads):

```yaml
corpus:
  format: folder
  path: "{cache}/python-docs/html"
  include: ["*.html"]
  exclude: ["_sources/*", "genindex*"]
  chunking: {split_by: word, split_length: 100, split_overlap: 20}
```
"""

from __future__ import annotations

import html
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from haystack import Document

from icr2_components.corpora.chunking import Chunker
from icr2_components.corpora.reader import CorpusReader, register_corpus_reader
from icr2_components.corpora.settings import ChunkingSettings, ConfigError, CorpusConfig
from icr2_components.extras import require_extra
from icr2_components.paths import folder_entry_problem
from icr2_components.text.blank import is_blank

# extension -> (Haystack converter class name, the modules it needs from the formats extra)
CONVERTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    ".txt": ("TextFileToDocument", ()),
    ".md": ("MarkdownToDocument", ("markdown_it", "mdit_plain")),
    ".markdown": ("MarkdownToDocument", ("markdown_it", "mdit_plain")),
    ".html": ("HTMLToDocument", ("trafilatura",)),
    ".htm": ("HTMLToDocument", ("trafilatura",)),
    ".pdf": ("PyPDFToDocument", ("pypdf",)),
}
DEFAULT_INCLUDE = ["*.txt", "*.md", "*.markdown", "*.html", "*.htm", "*.pdf"]

_HTML_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


@dataclass
class FolderCorpusSettings(CorpusConfig):
    format: str = "folder"
    # shell patterns on the path relative to the folder (`*` crosses folders); a file must match one include and
    # no exclude
    include: list[str] = field(default_factory=lambda: list(DEFAULT_INCLUDE))
    exclude: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if isinstance(self.chunking, dict):  # built in Python rather than from YAML
            self.chunking = ChunkingSettings(**self.chunking)
        super().validate()
        if not self.include:
            raise ConfigError("corpus.include is empty: no file would be read (default: every supported type).")
        for pattern in [*self.include, *self.exclude]:
            if not isinstance(pattern, str) or not pattern.strip():
                raise ConfigError(f"corpus.include and corpus.exclude list shell patterns, got {pattern!r}.")

    def validate_path(self) -> None:
        path = self.resolved_path()
        if path.exists() and not path.is_dir():
            raise ConfigError(f"corpus.path {self.path} is a file; corpus.format: folder reads the files in a folder.")

    def default_chunking(self) -> ChunkingSettings:
        return ChunkingSettings()


class _Capture(logging.Handler):
    """Keeps the warnings a converter logs while it reads one file (why it read nothing)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(record.getMessage())
        except Exception:  # a message that cannot be formatted is still a failure
            self.messages.append(str(record.msg))


def _title_of(path: Path, suffix: str, document: Document) -> str:
    try:
        if suffix in (".html", ".htm"):
            with open(path, "rb") as handle:
                match = _HTML_TITLE.search(handle.read(65536))
            if match:
                title = html.unescape(match.group(1).decode("utf-8", "replace"))
                title = " ".join(title.split())
                if title:
                    return title
        elif suffix in (".md", ".markdown"):
            with open(path, encoding="utf-8", errors="replace") as handle:
                match = _MD_HEADING.search(handle.read(65536))
            if match:
                return match.group(1).strip()
        elif suffix == ".pdf":
            title = document.meta.get("title")
            if isinstance(title, str) and title.strip():
                return title.strip()
    except OSError:
        pass
    return path.stem


# what a page shows no reader as its text: its head (the title is the passages' title, not their text), scripts
_NOT_TEXT = re.compile(r"<(head|script|style|noscript|template)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")


def _has_visible_text(path: Path) -> bool:
    """Whether a text, Markdown or HTML file holds any text outside its tags (and its head, scripts and styles);
    True for one that is not UTF-8 or cannot be read (the converter's failure is then the reason)."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return True
    text = _TAG.sub(" ", _NOT_TEXT.sub(" ", re.sub(r"<!--.*?-->", " ", text, flags=re.DOTALL)))
    return bool(html.unescape(text).strip())


@register_corpus_reader("folder")
class FolderCorpusReader(CorpusReader):
    settings_class = FolderCorpusSettings
    settings: FolderCorpusSettings

    def __init__(self, settings: FolderCorpusSettings) -> None:
        super().__init__(settings)
        self._converters: dict[str, Any] = {}

    def files(self) -> Iterator[tuple[str, Path]]:
        """``(relative path, path)`` of every file matched by ``include`` and no ``exclude``, sorted."""
        root = self.path()
        if not root.is_dir():
            raise ConfigError(f"corpus.path {root} is not a folder (corpus.format: folder).")
        found = []
        for folder, dirs, names in os.walk(root):
            dirs.sort()
            for name in names:
                path = Path(folder) / name
                relative = path.relative_to(root).as_posix()
                if not any(fnmatchcase(relative, p) for p in self.settings.include):
                    continue
                if any(fnmatchcase(relative, p) for p in self.settings.exclude):
                    continue
                found.append((relative, path))
        found.sort()
        return iter(found)

    def converter(self, suffix: str):
        if suffix not in self._converters:
            name, modules = CONVERTERS[suffix]
            if modules:
                require_extra("formats", f"corpus.format: folder ({suffix} files)", modules)
            from haystack.components import converters

            self._converters[suffix] = getattr(converters, name)()
        return self._converters[suffix]

    def convert(self, path: Path, suffix: str) -> tuple[Document | None, str]:
        """The file as one document, or None and why not (the converter's own warning, caught here rather than
        logged: the skip report carries it)."""
        converter = self.converter(suffix)
        capture = _Capture()
        logger = logging.getLogger(type(converter).__module__)
        saved = logger.level, logger.propagate
        logger.addHandler(capture)
        logger.setLevel(logging.WARNING)
        logger.propagate = False
        try:
            documents = converter.run(sources=[path])["documents"]
        except Exception as error:  # any converter failure costs this file only
            return None, f"{type(error).__name__}: {error}"
        finally:
            logger.removeHandler(capture)
            logger.setLevel(saved[0])
            logger.propagate = saved[1]
        if not documents:
            why = capture.messages[-1] if capture.messages else "the converter returned no document"
            return None, why
        return documents[0], ""

    def documents(self) -> Iterator[Document]:
        self.reset()
        chunker = Chunker(self.settings.effective_chunking())
        for relative, path in self.files():
            if self.at_limit():
                return
            problem = folder_entry_problem(path, relative)
            if problem is not None:  # checked first: a FIFO would block the converter, such a name the store
                self.skips.skip(problem[0], None, problem[1])
                continue
            suffix = path.suffix.lower()
            if suffix not in CONVERTERS:
                self.skips.skip("unsupported file type", None, f"{relative} (reads {', '.join(CONVERTERS)})")
                continue
            if not os.access(path, os.R_OK) or not path.is_file():
                self.skips.skip("unreadable or corrupt file", None, f"{relative}: cannot be opened")
                continue
            document, why = self.convert(path, suffix)
            if document is None:
                # a converter that finds no text in a file it could read (HTML of tags only) returns nothing, as
                # for a damaged one: the file tells the two apart, so one reason means one thing everywhere
                if suffix != ".pdf" and not _has_visible_text(path):
                    self.skips.skip("empty text", None, relative)
                else:
                    self.skips.skip("unreadable or corrupt file", None, f"{relative}: {why[:160]}")
                continue
            if not document.content or is_blank(document.content):
                self.skips.skip("empty text", None, relative)
                continue
            meta = {"file_path": relative, "title": _title_of(path, suffix, document)}
            passages = chunker.split(Document(content=document.content, meta=meta), relative, pages=suffix == ".pdf")
            if not passages:
                self.skips.skip("empty text", None, f"{relative}: no passage after chunking")
                continue
            self.records_read += 1
            yield from passages
