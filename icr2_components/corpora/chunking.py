"""Cutting a record into passages with Haystack's ``DocumentSplitter``, with ids that are the same on every read.

A passage's id is ``<record id>-<split_by><split_length>o<split_overlap>-<n>`` (``guide.html-word100o0-00003``):
the record and the chunking decide it, so a resumed load skips exactly what it wrote, and indexes chunked
differently never share an id. ``split_by: none`` keeps a record whole, its id as it is.

Usage:
    >>> from haystack import Document
    >>> from icr2_components.corpora.chunking import Chunker
    >>> from icr2_components.corpora.settings import ChunkingSettings
    >>> chunker = Chunker(ChunkingSettings(split_by="word", split_length=3, split_overlap=1))
    >>> [d.content for d in chunker.split(Document(content="one two three four five"), "r1")]
    ['one two three ', 'three four five']
"""

from __future__ import annotations

from haystack import Document

from icr2_components.corpora.settings import ChunkingSettings, ConfigError
from icr2_components.text.blank import is_blank

# what DocumentSplitter adds to a passage's meta that is of no use in a store (the parent's hash id, the overlap
# bookkeeping as a list of mappings): left out
_SPLITTER_META = ("source_id", "_split_overlap", "split_id", "split_idx_start")


def sentence_data_problem() -> str | None:
    """Why ``split_by: sentence`` cannot run here (NLTK or its punkt_tab data missing: Haystack would try to
    download it), or None."""
    try:
        import nltk
    except ImportError:
        return "split_by: sentence needs nltk (pip install nltk)"
    try:
        nltk.data.find("tokenizers/punkt_tab")
    except LookupError:
        return (
            "split_by: sentence needs NLTK's punkt_tab data, which is not installed here (python -m nltk.downloader "
            "punkt_tab, where the internet can be reached); split_by: period cuts at full stops without it"
        )
    return None


class Chunker:
    """Splits one record's document into passages by :class:`ChunkingSettings` (one ``DocumentSplitter``, warmed
    up once)."""

    def __init__(self, settings: ChunkingSettings) -> None:
        settings.validate()
        self.settings = settings
        self._splitter = None
        if settings.split_by == "sentence":
            problem = sentence_data_problem()
            if problem:
                raise ConfigError(f"corpus.chunking: {problem}.")

    def _get_splitter(self):
        if self._splitter is None:
            from haystack.components.preprocessors import DocumentSplitter

            splitter = DocumentSplitter(
                split_by=self.settings.split_by,
                split_length=self.settings.split_length,
                split_overlap=self.settings.split_overlap,
            )
            splitter.warm_up()
            self._splitter = splitter
        return self._splitter

    def split(self, document: Document, record_id: str, pages: bool = False) -> list[Document]:
        """The passages of ``document`` (its meta copied to each, with ``passage_index``, and ``page_number`` when
        ``pages`` or the text has form feeds, as a PDF read by PyPDFToDocument does); passages holding only
        whitespace are dropped."""
        if self.settings.split_by == "none":
            return [Document(id=record_id, content=document.content, meta={**document.meta, "passage_index": 0})]
        pieces = self._get_splitter().run(documents=[Document(content=document.content, meta=dict(document.meta))])
        passages = []
        tag = self.settings.tag()
        paged = pages or "\f" in (document.content or "")
        for piece in pieces["documents"]:
            if not piece.content or is_blank(piece.content):
                continue
            index = len(passages)
            meta = {key: value for key, value in piece.meta.items() if key not in _SPLITTER_META}
            if not paged:
                meta.pop("page_number", None)  # only pages (form feeds, as PDFs are read) have numbers
            meta["passage_index"] = index
            passages.append(Document(id=f"{record_id}-{tag}-{index:05d}", content=piece.content, meta=meta))
        return passages


__all__ = ["Chunker", "sentence_data_problem"]
