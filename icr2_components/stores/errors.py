"""What goes wrong with an index, whichever store holds it; each message says what to do."""

from __future__ import annotations

from typing import Any


class EmptyCorpusError(ValueError):
    """The corpus (or the documents given to ``build``) yielded no passage; nothing was indexed."""


class IndexNotBuiltError(ValueError):
    """The configured index does not exist; it is built with ``icr2 index``."""


class EmptyIndexError(ValueError):
    """The index exists but holds no passages."""


class DocumentCountMismatchError(RuntimeError):
    """After a load, the store holds a different number of documents than the stream delivered.

    ``report`` is what the load did (an Elasticsearch ``WriteReport``, or a backend's ``StoreWrite``).
    """

    def __init__(self, message: str, report: Any) -> None:
        super().__init__(message)
        self.report = report


class IndexConfigMismatchError(ValueError):
    """The index was built from another corpus or config than the one given (their fingerprints differ): reading
    it would answer from other passages, writing into it would mix two corpora. The message names both."""


class ExistingIndexError(ValueError):
    """An index used as it is (``corpus.format: existing``) lacks what retrieval needs: text in ``content``, or an
    embedding of the configured model's dimension. The message names the documents and the fix."""
