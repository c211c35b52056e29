"""Per-passage attention of a reader over a corpus-in-context prompt, for every layer and head.

The prompt is the CiC prompt the reader itself would see (``render_cic_prompt`` with the reader's chat
template), so the heads are probed and used on exactly the input they answer from. Query positions:

- ``last_prompt_token``: the row of the last prompt token (the one that predicts the first answer token);
- ``generated_tokens``: a short greedy generation whose own cached forward passes give the rows of the last
  prompt token and of every generated token fed back, averaged (ICR2 F.2: RTA retrieves with all tokens of
  its retrieval step). It costs the generation and nothing more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from haystack import Document

from icr2_components.extras import extra_import
from icr2_components.models.attention import (
    generation_passage_scores,
    passage_attention_scores,
    token_spans_from_char_spans,
)
from icr2_components.models.introspection import check_fits, context_limit

with extra_import("local") as torch_import:
    import torch

QUERY_POSITION_MODES = ("last_prompt_token", "generated_tokens")


@dataclass
class EncodedCiCPrompt:
    """A CiC prompt as token ids, with each passage's token span ``[start, end)`` in passage order."""

    input_ids: torch.Tensor  # (1, T)
    passage_ids: list[str]
    token_spans: list[tuple[int, int]]
    text: str


@dataclass
class PassageScores:
    """Attention of every (layer, head) to every passage: ``scores[layer, head, passage]``."""

    passage_ids: list[str]
    scores: torch.Tensor  # (layers, heads, passages), float32
    prompt_tokens: int
    query_positions: list[int]


def encode_cic_prompt(
    tokenizer,
    task_type: str,
    query: str,
    documents: Sequence[Document],
    query_aware: bool = False,
) -> EncodedCiCPrompt:
    """Render the CiC prompt with the reader's chat template and map each passage to its token span."""
    from icr2_components.text.templates import render_cic_prompt

    if not documents:
        raise ValueError("There are no passages to score: give at least one document.")
    rendered = render_cic_prompt(task_type, query, documents, tokenizer=tokenizer, query_aware=query_aware)
    # The chat template already wrote the special tokens as text; the tokenizer must not add them twice.
    encoded = tokenizer(rendered.text, add_special_tokens=False, return_offsets_mapping=True)
    char_spans = [rendered.passage_char_spans[pid] for pid in rendered.passage_ids]
    token_spans = token_spans_from_char_spans(encoded["offset_mapping"], char_spans)
    input_ids = torch.tensor([encoded["input_ids"]], dtype=torch.long)
    return EncodedCiCPrompt(input_ids, list(rendered.passage_ids), token_spans, rendered.text)


def score_passages(
    model,
    tokenizer,
    encoded: EncodedCiCPrompt,
    query_position_mode: str = "last_prompt_token",
    aggregate: str = "sum",
    layers: Sequence[int] | None = None,
    generation_tokens: int = 16,
    max_context_tokens: int | None = None,
    model_name: str = "the reader",
) -> PassageScores:
    """Score every passage of ``encoded`` by each head's attention from the chosen query positions."""
    if query_position_mode not in QUERY_POSITION_MODES:
        raise ValueError(f"query_position_mode must be one of {QUERY_POSITION_MODES}, got {query_position_mode!r}.")
    limit = context_limit(model, max_context_tokens)
    prompt_tokens = int(encoded.input_ids.shape[1])
    reserved = generation_tokens if query_position_mode == "generated_tokens" else 0
    check_fits(prompt_tokens, limit, reserved, model_name)
    if query_position_mode == "generated_tokens":
        scores, generated = generation_passage_scores(
            model, encoded.input_ids, encoded.token_spans, generation_tokens, aggregate=aggregate, layers=layers,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )
        # The last prompt token and each generated token fed back (all but the last one generated).
        positions = list(range(prompt_tokens - 1, prompt_tokens - 1 + max(1, int(generated.shape[1]))))
    else:
        positions = [prompt_tokens - 1]
        scores = passage_attention_scores(
            model, encoded.input_ids, encoded.token_spans, query_positions=positions, aggregate=aggregate, layers=layers
        )
    return PassageScores(encoded.passage_ids, scores, prompt_tokens, positions)


def top_m_indices(scores: torch.Tensor, m: int) -> torch.Tensor:
    """Indices of each head's ``m`` highest-scoring passages: (..., m). Ties go to the earlier passage."""
    if m < 1:
        raise ValueError(f"M must be >= 1, got {m}.")
    m = min(m, scores.shape[-1])
    # A stable descending sort keeps ties deterministic (torch.topk does not promise an order for ties).
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :m]
