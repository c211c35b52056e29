"""The corpus reader protocol and its registry: one class per format (``corpus.format`` of an index config).

Every reader yields Haystack ``Document`` passages in a deterministic order with deterministic, unique ids (an
Elasticsearch load resumes by skipping the prefix a checkpoint confirmed, so a second read must give the same
stream), counts every record it leaves out in :attr:`CorpusReader.skips` (a
:class:`~icr2_components.records.SkipReport`: reason, count, each one named) and says what its passages depend on
(:meth:`CorpusReader.fingerprint_key`), so that an index built from other data or other chunking is never reused.

Usage (a whole format: one document per line of a plain text file):

```python
from dataclasses import dataclass

from haystack import Document

from icr2_components.corpora import CorpusConfig, CorpusReader, register_corpus_reader


@dataclass
class LinesSettings(CorpusConfig):
    format: str = "lines"


@register_corpus_reader("lines")
class LinesReader(CorpusReader):
    settings_class = LinesSettings

    def documents(self):
        self.reset()
        with open(self.path(), encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    self.skips.skip("empty text", number)
                    continue
                yield Document(id=f"line-{number}", content=line.strip())
```

after which ``corpus: {format: lines, path: notes.txt}`` works in any index config.
"""

from __future__ import annotations

import dataclasses
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from haystack import Document

from icr2_components.corpora.settings import ConfigError, CorpusConfig
from icr2_components.paths import input_path_problem, special_file_kind
from icr2_components.records import SkipReport
from icr2_components.registry import Registry


class UnknownCorpusFormatError(ConfigError):
    """No corpus reader is registered under the name; the message lists the registered formats."""


_CORPUS_READERS: Registry[type] = Registry(
    "corpus format",
    UnknownCorpusFormatError,
    unknown_message=lambda name, names: f"Unknown corpus format {name!r}; registered formats: {', '.join(names)}.",
    how_to_add="A new format is a CorpusReader subclass decorated with @register_corpus_reader "
    "(icr2_components.corpora).",
)


class CorpusReader(ABC):
    """Reads one corpus format into passages.

    :param settings: the ``corpus:`` section, an instance of :attr:`settings_class`.
    """

    #: the ``corpus.format`` this reader serves (set by :func:`register_corpus_reader`)
    format: ClassVar[str] = ""
    #: the dataclass of the ``corpus:`` section for this format
    settings_class: ClassVar[type[CorpusConfig]] = CorpusConfig

    def __init__(self, settings: CorpusConfig) -> None:
        if not isinstance(settings, self.settings_class):
            raise TypeError(
                f"{type(self).__name__} reads corpus settings of type {self.settings_class.__name__}, got "
                f"{type(settings).__name__}; build them with corpus_settings_from_mapping."
            )
        self.settings = settings
        self.skips = SkipReport(source=str(settings.path))
        #: records read and kept (articles, rows, files), what ``max_articles`` caps
        self.records_read = 0

    def reset(self) -> None:
        """Start a new read: counts from zero (call at the start of :meth:`documents`)."""
        self.skips = SkipReport(source=str(self.source_path()))
        self.records_read = 0

    def source_path(self) -> Path:
        """The file or folder read (``path`` expanded)."""
        return self.settings.resolved_path()

    def path(self) -> Path:
        """The existing file or folder read; :class:`FileNotFoundError` naming the key when there is none, a
        :class:`ConfigError` when it is a FIFO, socket or device (reading one waits or never ends), on /proc or
        /sys, or unreadable."""
        path = self.source_path()
        if not path.exists() and special_file_kind(path) is None:
            raise FileNotFoundError(f"corpus.path {path} does not exist (corpus.format: {self.format}).")
        problem = input_path_problem(path)
        if problem is not None:
            raise ConfigError(f"corpus.path: {problem} (corpus.format: {self.format}); give a regular file or "
                              "folder that can be read.")
        return path

    def at_limit(self) -> bool:
        """Whether ``max_articles`` records have been read."""
        limit = self.settings.max_articles
        return limit is not None and self.records_read >= limit

    @abstractmethod
    def documents(self) -> Iterator[Document]:
        """The passages, in a deterministic order, ids unique; bad records counted in :attr:`skips`."""

    def describe(self) -> str:
        """A short phrase for messages: ``jsonl corpus docs.jsonl``."""
        return f"{self.format} corpus {self.source_path()}"

    def fingerprint_key(self) -> dict[str, Any]:
        """What the passages depend on (the data read and every setting of the section but ``count_tokens_for``),
        JSON-able; the index config's fingerprint hashes it with the embedding's settings."""
        settings = dataclasses.asdict(self.settings)
        settings.pop("count_tokens_for", None)
        settings.pop("path", None)
        return {"format": self.format, "data": self.data_key(), "settings": settings}

    def data_key(self) -> Any:
        """What identifies the data read: :func:`data_identity` of ``path``."""
        return data_identity(self.path())


def data_identity(path: Path) -> dict[str, Any]:
    """The resolved path and size of a file, or of every file under a folder (sorted relative paths and sizes,
    hashed): what a saved index of it depends on."""
    import hashlib

    path = path.resolve()
    if path.is_file():
        return {"path": str(path), "size": path.stat().st_size}
    digest = hashlib.sha1()
    files = 0
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            file = Path(root) / name
            try:
                size = file.stat().st_size
            except OSError:
                size = -1  # a dangling link: part of the folder as it is
            digest.update(f"{file.relative_to(path).as_posix()}\0{size}\n".encode("utf-8", "surrogateescape"))
            files += 1
    return {"path": str(path), "files": files, "listing": digest.hexdigest()[:16]}


def register_corpus_reader(name: str) -> Callable[[type[CorpusReader]], type[CorpusReader]]:
    """Class decorator: read ``corpus.format: <name>`` with the decorated :class:`CorpusReader` subclass."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"A corpus format's name must be a non-empty string, got {name!r}.")

    def register(cls: type[CorpusReader]) -> type[CorpusReader]:
        if not (isinstance(cls, type) and issubclass(cls, CorpusReader)):
            raise TypeError(f"@register_corpus_reader({name!r}) decorates a CorpusReader subclass, not {cls!r}.")
        settings = cls.settings_class
        if not (dataclasses.is_dataclass(settings) and issubclass(settings, CorpusConfig)):
            raise TypeError(f"{cls.__name__}.settings_class must be a dataclass subclassing CorpusConfig.")
        default = next(f.default for f in dataclasses.fields(settings) if f.name == "format")
        if default != name:
            raise TypeError(
                f"{settings.__name__}.format must default to {name!r} (the name {cls.__name__} is registered under), "
                f"got {default!r}."
            )
        _CORPUS_READERS.register(name, cls)
        cls.format = name
        return cls

    return register


def corpus_reader_class(name: str) -> type[CorpusReader]:
    """The reader class registered as ``name``; :class:`UnknownCorpusFormatError` lists the registered ones."""
    return _CORPUS_READERS.get(name)


def corpus_format_names() -> tuple[str, ...]:
    """The registered corpus formats, sorted."""
    return _CORPUS_READERS.names()


def corpus_reader(settings: CorpusConfig) -> CorpusReader:
    """The reader of ``settings.format`` over ``settings`` (a plain :class:`CorpusConfig` is taken as that format's
    settings with the shared keys it gives)."""
    cls = corpus_reader_class(settings.format)
    if type(settings) is CorpusConfig and cls.settings_class is not CorpusConfig:
        shared = {f.name: getattr(settings, f.name) for f in dataclasses.fields(CorpusConfig)}
        settings = cls.settings_class(**shared)
    return cls(settings)


__all__ = [
    "CorpusReader",
    "UnknownCorpusFormatError",
    "corpus_format_names",
    "corpus_reader",
    "corpus_reader_class",
    "data_identity",
    "register_corpus_reader",
]
