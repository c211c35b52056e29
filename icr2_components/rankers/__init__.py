"""Rankers: BiEncoderRanker, RetrievalHeadRanker and the torch module of the ICR2 retrieval head (section 4.3)."""

from icr2_components.rankers.bi_encoder_ranker import BiEncoderRanker
from icr2_components.rankers.retrieval_head import HeadConfig, RetrievalHead
from icr2_components.rankers.retrieval_head_ranker import RetrievalHeadRanker

__all__ = [
    "BiEncoderRanker",
    "HeadConfig",
    "RetrievalHead",
    "RetrievalHeadRanker",
]
