"""Context filters: the Retrieval Attention Probing filter (ICR2 section 4.2) and the passage scoring it runs.

Head probing (RAP's retrieval heads, PH3's context/memory heads: the artifacts the filter and the head-suppression
reader read) lives beside it in ``filters.probing``; it is a job, not a component, so it is not imported here.
"""

from icr2_components.filters.retrieval_attention_filter import RetrievalAttentionFilter

__all__ = [
    "RetrievalAttentionFilter",
]
