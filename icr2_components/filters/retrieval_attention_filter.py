"""RetrievalAttentionFilter: keep the passages the reader's retrieval heads attend to (ICR2 RAP, section 4.2).

ICR2: Qiu et al. 2025, "Eliciting In-context Retrieval and Reasoning for Long-context Large Language Models",
https://arxiv.org/abs/2501.08248
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, ClassVar

from haystack import Document, component

from icr2_components.artifacts.retrieval_heads import RetrievalHeadArtifact
from icr2_components.filters.passage_scoring import (
    QUERY_POSITION_MODES,
    encode_cic_prompt,
    score_passages,
    top_m_indices,
)
from icr2_components.models.cache import MODEL_CACHE, check_dtype_device
from icr2_components.models.introspection import model_signature
from icr2_components.parameters import override, positive_int

logger = logging.getLogger(__name__)


def head_name(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


def union_of_top_m(head_scores: dict[str, list[float]], m: int) -> tuple[list[int], dict[int, list[str]]]:
    """Indices (ascending) of the passages in any head's top-M, and which heads chose each."""
    import torch

    chosen: dict[int, list[str]] = {}
    for name, scores in head_scores.items():
        for index in top_m_indices(torch.tensor(scores), m).tolist():
            chosen.setdefault(int(index), []).append(name)
    return sorted(chosen), chosen


def check_selection(top_m: int | None, num_heads: int | None) -> None:
    """M and Q, at init and per call: positive integers, or None for the artifact's."""
    positive_int(top_m, "top_m (M)", optional=True, hint=" (the artifact's M)")
    positive_int(num_heads, "num_heads (Q)", optional=True, hint=" (the artifact's Q)")


@component
class RetrievalAttentionFilter:
    """
    Replaces a long corpus-in-context by the passages the reader's retrieval heads attend to: one forward
    pass of the reader over the CiC prompt, each probed head's top-M passages, united: retrieval attention
    probing (RAP), section 4.2 of ICR2 ([Qiu et al. 2025](https://arxiv.org/abs/2501.08248)).

    The heads come from an artifact written by `icr2 probe-heads` for this reader, prompt template and
    query-position mode; it is read in `warm_up` (or by the first `run`), never in `__init__`. The reader is
    taken from the shared `MODEL_CACHE` with the same name, dtype, device and sdpa attention as
    `LocalChatReader`, so a RAP pipeline holds one copy of the weights. The forward pass stops after the deepest
    selected head's layer, and no T x T attention matrix is built.

    Kept documents are copies, in their input order, with meta `rap_score` (the summed attention of the
    selected heads), `rap_head_scores` (`{"L17H2": attention}`) and `rap_selected_by` (the heads whose top-M
    held them).

    Usage example:
    ```python
    from icr2_components.filters import RetrievalAttentionFilter

    rap = RetrievalAttentionFilter(artifact="bench/results/rap_heads_smollm2.json", top_m=1, num_heads=4)
    rap.warm_up()
    result = rap.run(documents=corpus, query="who wrote the declaration of independence")
    short_corpus, report = result["documents"], result["report"]
    ```
    """

    model_needs: ClassVar[dict[str, str]] = {
        "weights": "scores passages by the attention of its probed heads (Retrieval Attention Probing), "
        "which needs the weights",
    }
    """What this component needs of the model: a backend kind that does not provide it (a served one) refuses it."""
    backend_role: ClassVar[str] = "white_box"  # on a local backend naming another model, it loads that model

    def __init__(
        self,
        artifact: str,
        model: str | None = None,
        top_m: int | None = None,
        num_heads: int | None = None,
        dtype: str = "auto",
        device: str | None = None,
        max_context_tokens: int | None = None,
        generation_tokens: int | None = None,
    ) -> None:
        """
        :param artifact: Path of the retrieval-head JSON written by `icr2 probe-heads` (read at `warm_up`).
        :param model: The reader (alias, path or HF id); None: the artifact's model, decided at `warm_up`. Must
            be the model the heads were probed on.
        :param top_m: M, passages kept per head (defaults to the artifact's M).
        :param num_heads: Q, heads used (defaults to the artifact's Q; at most the heads the artifact ranks).
        :param dtype: As for `LocalChatReader` (use the same value to share the loaded model).
        :param device: As for `LocalChatReader`.
        :param max_context_tokens: Refuse prompts longer than this (default: the model's context length).
        :param generation_tokens: Tokens generated first in the `generated_tokens` query-position
            mode (defaults to the artifact's, the number the heads were probed with).
        """
        check_selection(top_m, num_heads)
        check_dtype_device(dtype, device)
        positive_int(max_context_tokens, "max_context_tokens", optional=True, hint=" (the model's context length)")
        positive_int(generation_tokens, "generation_tokens", optional=True, hint=" (the artifact's)")
        self.artifact = artifact
        self.model = model
        self.top_m = top_m
        self.num_heads = num_heads
        self.dtype = dtype
        self.device = device
        self.max_context_tokens = max_context_tokens
        self.generation_tokens = generation_tokens
        self._artifact: RetrievalHeadArtifact | None = None
        self._model: Any = None  # the reader and its tokenizer, taken from MODEL_CACHE by warm_up
        self._tokenizer: Any = None

    def _load_artifact(self) -> RetrievalHeadArtifact:
        """Read and check the artifact once (the reader is not needed for this)."""
        if self._artifact is None:
            loaded = RetrievalHeadArtifact.load(self.artifact)  # names `icr2 probe-heads` when it is missing
            if self.num_heads is not None:
                loaded.top_heads(self.num_heads)  # raises when the artifact ranks fewer heads
            if loaded.query_position_mode not in QUERY_POSITION_MODES:
                raise ValueError(f"{self.artifact} uses an unknown query-position mode {loaded.query_position_mode!r}.")
            self._artifact = loaded
        return self._artifact

    def _reader(self, artifact: RetrievalHeadArtifact) -> str:
        """The reader: `model`, or the artifact's model when `model` is None."""
        return self.model or artifact.model

    def warm_up(self) -> None:
        """Read the artifact and take the reader from `MODEL_CACHE`, refusing a reader the heads were not probed on."""
        artifact = self._load_artifact()
        if self._model is None:
            reader = self._reader(artifact)
            model, tokenizer = MODEL_CACHE.causal_lm(
                reader, dtype=self.dtype, device=self.device, attn_implementation="sdpa"
            )
            signature = model_signature(model)
            # the heads' indices against the loaded model's shape first: a head past its last layer or head would
            # otherwise be a question of which other head gets used
            artifact.check_heads(signature["num_layers"], signature["num_heads"], f"the reader {reader}")
            artifact.check_model(reader, signature)
            self._model, self._tokenizer = model, tokenizer

    @staticmethod
    def trace_record(outputs: dict[str, Any]) -> dict[str, Any] | None:
        """What the filter did to one question's passages, read from its outputs (compare records it with the
        answer: ``pipeline_spec``): the ids kept and dropped in the order given, each passage's score, M and Q.

        :returns: the trace, or None when the outputs hold no report.
        """
        report = outputs.get("report")
        if not isinstance(report, dict):
            return None
        scored = report.get("scored") or []
        kept = [s["id"] for s in scored if s.get("kept")] if scored else [
            d.id for d in outputs.get("documents") or []]
        return {"technique": "rap_filter", "kept_ids": kept,
                "dropped_ids": [s["id"] for s in scored if not s.get("kept")],
                "scores": {s["id"]: s.get("score") for s in scored}, "top_m": report.get("top_m"),
                "heads": report.get("heads"), "m_clamped": report.get("m_clamped")}

    @component.output_types(documents=list[Document], report=dict)
    def run(
        self,
        documents: list[Document],
        query: str,
        top_m: int | None = None,
        num_heads: int | None = None,
    ) -> dict[str, Any]:
        """
        :param documents: The corpus in context, in prompt order (meta `passage_id` as set by the corpus builder,
            else ids by position).
        :param query: The question the reader will answer.
        :param top_m: Overrides M for this call (checked as at init: a positive integer).
        :param num_heads: Overrides Q for this call (checked as at init: a positive integer).
        :returns: `documents`: the kept passages; `report`: counts in and out, M and Q used, the prompt length,
            whether M was clamped to the number of passages, and `scored`: every passage given, in order, as
            `{"id", "score" (its heads' summed attention), "kept"}`.
        :raises ValueError: `top_m` or `num_heads` not a positive integer, or more heads than the artifact ranks.
        :raises ContextTooLongError: the corpus prompt does not fit the model's context.
        """
        check_selection(top_m, num_heads)
        artifact = self._load_artifact()
        m = override(top_m, override(self.top_m, artifact.m))
        heads = artifact.top_heads(override(num_heads, override(self.num_heads, artifact.q)))
        report: dict[str, Any] = {"passages_in": len(documents), "top_m": m, "heads": [head_name(*h) for h in heads],
                                  "m_clamped": False, "prompt_tokens": 0}
        if not documents:
            logger.warning("RetrievalAttentionFilter got no documents; nothing to filter.")
            report.update(passages_out=0, empty_input=True)
            return {"documents": [], "report": report}
        if m >= len(documents):
            # Every passage would be kept: say so rather than pretend the filter chose.
            logger.warning("M=%d is not smaller than the %d passages given; all are kept.", m, len(documents))
            report["m_clamped"] = True
            m = len(documents)
        self.warm_up()
        encoded = encode_cic_prompt(self._tokenizer, artifact.task_type, query, documents, artifact.query_aware)
        layers = sorted({layer for layer, _ in heads})
        scored = score_passages(
            self._model, self._tokenizer, encoded, artifact.query_position_mode, artifact.aggregate,
            layers=layers, generation_tokens=self.generation_tokens or artifact.generation_tokens,
            max_context_tokens=self.max_context_tokens, model_name=self._reader(artifact),
        )
        row_of_layer = {layer: row for row, layer in enumerate(layers)}
        head_scores = {head_name(layer, h): scored.scores[row_of_layer[layer], h].tolist() for layer, h in heads}
        kept, chosen_by = union_of_top_m(head_scores, m)
        kept_set = set(kept)
        # every passage given, in order, with its summed head score: which were dropped is part of what it did
        report["scored"] = [{"id": document.id, "score": round(sum(scores[i] for scores in head_scores.values()), 6),
                             "kept": i in kept_set} for i, document in enumerate(documents)]
        output = []
        for index in kept:
            document = documents[index]
            per_head = {name: float(scores[index]) for name, scores in head_scores.items()}
            meta = {**(document.meta or {}), "rap_score": sum(per_head.values()), "rap_head_scores": per_head,
                    "rap_selected_by": chosen_by[index]}
            output.append(replace(document, meta=meta))
        report.update(passages_out=len(output), prompt_tokens=scored.prompt_tokens, empty_input=False)
        return {"documents": output, "report": report}
