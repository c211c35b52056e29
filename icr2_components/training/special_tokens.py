"""Adding the retrieval markers ``<RETRIEVAL>`` / ``</RETRIEVAL>`` to a reader's tokenizer and embeddings.

They are added as *atomic, non-skipped* tokens (``AddedToken(special=False)``): each marker is one token id
that BPE never splits, but decoding with ``skip_special_tokens=True`` (what ``LocalChatReader`` does) keeps
them, so the reply still shows where retrieval starts and ends and can be parsed. The embedding matrix is
resized (``resize_token_embeddings``, new rows initialised to the mean of the old ones, transformers' default)
and the tied output layer follows.
"""

from __future__ import annotations

from icr2_components.text.retrieval_replies import RETRIEVAL_TOKENS


def add_retrieval_tokens(tokenizer, model=None) -> list[int]:
    """Add the markers (idempotent), resize ``model``'s embeddings when given, return the markers' ids.

    Usage:
        >>> ids = add_retrieval_tokens(tokenizer, model)   # e.g. [49152, 49153] for SmolLM2
    """
    from transformers import AddedToken

    missing = [t for t in RETRIEVAL_TOKENS if t not in tokenizer.get_vocab()]
    if missing:
        tokenizer.add_tokens([AddedToken(t, special=False, normalized=False, single_word=False) for t in missing])
    ids = [tokenizer.convert_tokens_to_ids(t) for t in RETRIEVAL_TOKENS]
    if model is not None:
        rows = model.get_input_embeddings().weight.shape[0]
        if rows < len(tokenizer):
            model.resize_token_embeddings(len(tokenizer))
    return ids


def check_marker_tokens(tokenizer) -> list[int]:
    """Raise unless each marker encodes to exactly one token id; return the ids."""
    ids = []
    for marker in RETRIEVAL_TOKENS:
        encoded = tokenizer(marker, add_special_tokens=False)["input_ids"]
        if len(encoded) != 1:
            raise ValueError(
                f"{marker} encodes to {len(encoded)} tokens; this tokenizer was not prepared with "
                "add_retrieval_tokens (load the fine-tuned output folder, not the base model)."
            )
        ids.append(encoded[0])
    return ids
