"""The examples' data: NaturalQuestions-Open questions with their gold Wikipedia paragraphs.

Read at run time from ``nq-open-oracle.jsonl.gz`` in the shared data folder (``ICR2_DATA_DIR``, else
``../shared/data`` beside the working folder or the checkout), never copied. Your own documents go into the
document store the same way: a list of Haystack ``Document`` objects.
"""

from __future__ import annotations

import gzip
import json

from haystack import Document

from icr2_components.kilt.sample import NQ_FILE, shared_data_dir


def read_nq_open(limit: int) -> list[dict]:
    """The first ``limit`` records: ``question``, ``answers`` and the gold paragraph (``ctxs[0]``)."""
    records = []
    with gzip.open(shared_data_dir() / NQ_FILE, "rt", encoding="utf-8") as handle:
        for line in handle:
            records.append(json.loads(line))
            if len(records) == limit:
                break
    return records


def first_question() -> tuple[str, list[str]]:
    """The first NQ-Open question and its gold answers (its paragraph is among ``nq_documents()``)."""
    record = read_nq_open(1)[0]
    return record["question"], record["answers"]


def nq_documents(limit: int = 300) -> list[Document]:
    """The gold paragraphs of the first ``limit`` questions as Haystack documents (repeated paragraphs once)."""
    documents: dict[str, Document] = {}
    for record in read_nq_open(limit):
        gold = record["ctxs"][0]
        text = " ".join(gold["text"].split())
        documents.setdefault(text, Document(content=text, meta={"title": gold["title"]}))
    return list(documents.values())
