"""Probed-head artifacts on disk: one base (JSON save/load, the model check) and the RAP and PH3 artifacts."""

from icr2_components.artifacts.base import ArtifactMismatchError
from icr2_components.artifacts.ph3_heads import PH3HeadArtifact
from icr2_components.artifacts.retrieval_heads import RetrievalHeadArtifact

__all__ = [
    "ArtifactMismatchError",
    "PH3HeadArtifact",
    "RetrievalHeadArtifact",
]
