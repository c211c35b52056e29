"""Context filters: the Retrieval Attention Probing filter (ICR2 section 4.2) and the passage scoring it runs.

Probing the heads (what makes the artifact the filter reads) is a job, not a component: ``icr2_components.probing``.
"""

from icr2_components.filters.passage_scoring import (
    QUERY_POSITION_MODES,
    PassageScores,
    encode_cic_prompt,
    score_passages,
)
from icr2_components.filters.retrieval_attention_filter import RetrievalAttentionFilter

__all__ = [
    "PassageScores",
    "QUERY_POSITION_MODES",
    "RetrievalAttentionFilter",
    "encode_cic_prompt",
    "score_passages",
]
