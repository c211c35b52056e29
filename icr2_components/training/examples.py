"""ICR2 benchmark records -> token ids and labels for supervised fine-tuning (loss only on the target).

The prompt is the reader's own CiC prompt (``render_cic_prompt`` through its chat template, generation prompt
included); the target (``targets.format_target``) follows, closed by the end-of-turn token. Prompt and target
are tokenized separately and concatenated, which is exactly what the reader sees at generation time. Labels
are ``-100`` on every prompt token.

Too long for ``max_length`` (the recipe's, at most the model's context)? ``truncation`` decides:

- ``drop_distractors`` (default): non-gold passages are removed, last first, until the sequence fits; the gold
  passages are always kept (their ids do not change). If even the gold passages alone do not fit, the example
  is skipped and counted.
- ``skip``: the example is skipped and counted (ICR2 F.1: "discarding any sequences exceeding this threshold").
- ``error``: :class:`SequenceTooLongError` is raised.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from haystack import Document

from icr2_components.text.retrieval_replies import format_target
from icr2_components.text.templates import render_cic_prompt

TRUNCATION_POLICIES = ("drop_distractors", "skip", "error")
IGNORE_INDEX = -100


class SequenceTooLongError(ValueError):
    """An example does not fit the maximum sequence length (raised with ``truncation="error"``)."""


class GoldNotInContextError(ValueError):
    """A record's gold passage ids are not all among its context passages."""


@dataclass
class EncodedExample:
    """One training example: ``input_ids`` = prompt + target, ``labels`` = -100 on the prompt."""

    id: str
    input_ids: list[int]
    labels: list[int]
    prompt_length: int
    dropped_passages: int = 0
    passage_ids: list[str] = field(default_factory=list)
    gold_passage_ids: list[str] = field(default_factory=list)
    documents: list[Document] = field(default_factory=list)
    query: str = ""
    task_type: str = "qa"

    def as_features(self) -> dict[str, list[int]]:
        return {"input_ids": self.input_ids, "attention_mask": [1] * len(self.input_ids), "labels": self.labels}


def gold_in_order(documents: list[Document], gold_ids: Iterable[str]) -> list[tuple[str, str]]:
    """``(passage_id, text)`` of the gold passages in context order; raises when one is missing."""
    wanted = set(gold_ids)
    shown = {str(d.meta.get("passage_id")) for d in documents}
    missing = sorted(wanted - shown)
    if missing:
        raise GoldNotInContextError(f"gold passage ids {missing} are not in the context")
    return [(str(d.meta["passage_id"]), d.content) for d in documents if str(d.meta.get("passage_id")) in wanted]


def encode_prompt_and_target(
    tokenizer, task_type: str, query: str, documents: list[Document], target: str
) -> tuple[list[int], list[int]]:
    """Token ids of the chat-templated CiC prompt and of ``target`` + end-of-turn."""
    prompt = render_cic_prompt(task_type, query, documents, tokenizer=tokenizer).text
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return prompt_ids, target_ids


def encode_example(
    tokenizer,
    record_id: str,
    query: str,
    answer: str,
    documents: list[Document],
    gold_ids: list[str],
    method: str,
    max_length: int,
    task_type: str = "qa",
    truncation: str = "drop_distractors",
) -> EncodedExample | None:
    """Encode one example; ``None`` when it was skipped for length (the caller counts it)."""
    if truncation not in TRUNCATION_POLICIES:
        raise ValueError(f"truncation must be one of {TRUNCATION_POLICIES}, got {truncation!r}.")
    gold = gold_in_order(documents, gold_ids)
    target = format_target(method, answer, gold, task_type)
    kept = list(documents)
    wanted = set(gold_ids)
    dropped = 0
    while True:
        prompt_ids, target_ids = encode_prompt_and_target(tokenizer, task_type, query, kept, target)
        length = len(prompt_ids) + len(target_ids)
        if length <= max_length:
            break
        if truncation == "error":
            raise SequenceTooLongError(
                f"Example {record_id} has {length} tokens but max_length is {max_length}. Use a smaller corpus budget, "
                "raise max_seq_length (up to the model's context), or set truncation: drop_distractors."
            )
        distractors = [i for i, d in enumerate(kept) if str(d.meta.get("passage_id")) not in wanted]
        if truncation == "skip" or not distractors:
            return None
        kept.pop(distractors[-1])
        dropped += 1
    return EncodedExample(
        id=record_id,
        input_ids=prompt_ids + target_ids,
        labels=[IGNORE_INDEX] * len(prompt_ids) + target_ids,
        prompt_length=len(prompt_ids),
        dropped_passages=dropped,
        passage_ids=[str(d.meta.get("passage_id")) for d in kept],
        gold_passage_ids=list(gold_ids),
        documents=kept,
        query=query,
        task_type=task_type,
    )


def pad_batch(features: list[dict[str, list[int]]], pad_token_id: int) -> dict[str, Any]:
    """Right-pad a list of features into tensors (labels padded with -100)."""
    import torch

    width = max(len(f["input_ids"]) for f in features)
    out: dict[str, list[list[int]]] = {"input_ids": [], "attention_mask": [], "labels": []}
    for f in features:
        pad = width - len(f["input_ids"])
        out["input_ids"].append(f["input_ids"] + [pad_token_id] * pad)
        out["attention_mask"].append(f["attention_mask"] + [0] * pad)
        out["labels"].append(f["labels"] + [IGNORE_INDEX] * pad)
    return {key: torch.tensor(value, dtype=torch.long) for key, value in out.items()}
