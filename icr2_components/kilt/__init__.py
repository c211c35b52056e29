"""KILT support: the knowledge-source and task-file readers, passage chunking, provenance mapping, the sample."""

from icr2_components.kilt.chunking import Passage, chunk_article, passage_id
from icr2_components.kilt.knowledge_source import KiltKnowledgeSource, passage_to_document
from icr2_components.kilt.sample import SampleFiles, build_sample, shared_data_dir
from icr2_components.kilt.tasks import KiltTask, PassageSpanIndex, Provenance, read_kilt_tasks

__all__ = [
    "KiltKnowledgeSource",
    "KiltTask",
    "Passage",
    "PassageSpanIndex",
    "Provenance",
    "SampleFiles",
    "build_sample",
    "chunk_article",
    "passage_id",
    "passage_to_document",
    "read_kilt_tasks",
    "shared_data_dir",
]
