"""KILT support: the knowledge-source and task-file readers, passage chunking, provenance mapping, the sample."""

from icr2_components.kilt.knowledge_source import KiltKnowledgeSource
from icr2_components.kilt.sample import build_sample
from icr2_components.kilt.tasks import KiltTask

__all__ = [
    "KiltKnowledgeSource",
    "KiltTask",
    "build_sample",
]
