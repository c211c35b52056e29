"""A CiC prompt prepared for the retrieval head: token ids, each passage's token span and the query's span."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from haystack import Document

from icr2_components.models.attention import token_spans_from_char_spans
from icr2_components.text.templates import render_cic_prompt


@dataclass
class HeadInput:
    input_ids: torch.Tensor  # (1, T)
    passage_ids: list[str]
    passage_spans: list[tuple[int, int]]
    query_span: tuple[int, int]


def encode_for_head(
    tokenizer, task_type: str, query: str, documents: Sequence[Document], query_aware: bool = False
) -> HeadInput:
    """Render the reader's CiC prompt and locate the passages and the (last) query mention in tokens."""
    if not documents:
        raise ValueError("The retrieval head needs at least one passage.")
    rendered = render_cic_prompt(task_type, query, documents, tokenizer=tokenizer, query_aware=query_aware)
    encoded = tokenizer(rendered.text, add_special_tokens=False, return_offsets_mapping=True)
    chars = [rendered.passage_char_spans[pid] for pid in rendered.passage_ids] + [rendered.query_char_spans[-1]]
    spans = token_spans_from_char_spans(encoded["offset_mapping"], chars)
    return HeadInput(torch.tensor([encoded["input_ids"]]), list(rendered.passage_ids), spans[:-1], spans[-1])


def final_hidden_states(model, input_ids: torch.Tensor) -> torch.Tensor:
    """The reader's last-layer hidden states (1, T, d), without computing the full-vocabulary logits."""
    output = model(input_ids=input_ids.to(model.device), output_hidden_states=True, use_cache=False, logits_to_keep=1)
    return output.hidden_states[-1]
