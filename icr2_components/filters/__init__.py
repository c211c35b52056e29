"""Context filters: Retrieval Attention Probing (ICR2 section 4.2) — head probing, artifacts, the RAP filter."""

from icr2_components.filters.head_artifact import ArtifactMismatchError, RetrievalHeadArtifact, plot_hit_rate_heatmap
from icr2_components.filters.head_probing import (
    CiCInstance,
    ProbeResult,
    chance_hit_rate,
    instance_hit_rates,
    probe_heads,
    select_heads,
    split_instances,
    top_m_indices,
)
from icr2_components.filters.passage_scoring import (
    QUERY_POSITION_MODES,
    ContextTooLongError,
    PassageScores,
    encode_cic_prompt,
    model_signature,
    score_passages,
)
from icr2_components.filters.retrieval_attention_filter import RetrievalAttentionFilter

__all__ = [
    "ArtifactMismatchError",
    "CiCInstance",
    "ContextTooLongError",
    "PassageScores",
    "ProbeResult",
    "QUERY_POSITION_MODES",
    "RetrievalAttentionFilter",
    "RetrievalHeadArtifact",
    "chance_hit_rate",
    "encode_cic_prompt",
    "instance_hit_rates",
    "model_signature",
    "plot_hit_rate_heatmap",
    "probe_heads",
    "score_passages",
    "select_heads",
    "split_instances",
    "top_m_indices",
]
