"""Records on disk: line-by-line reading of plain or gzip JSON lines, and counted skips of bad records."""

from icr2_components.records.reading import CorpusReadError
from icr2_components.records.skips import SkipReport

__all__ = [
    "CorpusReadError",
    "SkipReport",
]
