"""RetrievalHeadRanker: keeps the K passages a trained retrieval head (ICR2 section 4.3) scores highest.

ICR2: Qiu et al. 2025, "Eliciting In-context Retrieval and Reasoning for Long-context Large Language Models",
https://arxiv.org/abs/2501.08248
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, ClassVar

from haystack import Document, component

from icr2_components.models.cache import MODEL_CACHE
from icr2_components.models.introspection import check_fits, context_limit, model_signature
from icr2_components.parameters import override, positive_int
from icr2_components.rankers.retrieval_head import RetrievalHead, find_head_folder

logger = logging.getLogger(__name__)


@component
class RetrievalHeadRanker:
    """
    Scores the corpus in context with a trained retrieval head over the reader's final hidden states and keeps
    the top K passages (the C* the reader then answers from): joint retrieval head training, section 4.3 of ICR2
    ([Qiu et al. 2025](https://arxiv.org/abs/2501.08248)).

    The head is read in `warm_up` (or by the first `run`), never in `__init__`.

    The reader comes from the shared `MODEL_CACHE` (the head's recorded reader by default: the base alias when
    only the head was trained, the fine-tuned folder when the reader was trained with it), so a generator naming
    the same model shares its weights.

    Usage example:
    ```python
    from icr2_components.rankers import RetrievalHeadRanker

    ranker = RetrievalHeadRanker(head="runs/smollm2-retrieval-head", top_k=2)
    ranker.warm_up()
    result = ranker.run(documents=cic_documents, query="who got the first nobel prize in physics")
    kept, report = result["documents"], result["report"]
    ```
    """

    model_needs: ClassVar[dict[str, str]] = {
        "weights": "ranks passages with the model's attention heads and a trained head, which needs the weights",
    }
    """What this component needs of the model: a backend kind that does not provide it (a served one) refuses it."""
    backend_role: ClassVar[str] = "white_box"  # on a local backend naming another model, it loads that model

    def __init__(
        self,
        head: str,
        model: str | None = None,
        top_k: int | None = None,
        keep_order: bool = False,
        dtype: str = "float32",
        device: str | None = None,
        max_context_tokens: int | None = None,
    ) -> None:
        """
        :param head: Folder of a trained head (`<output_dir>/retrieval_head`, or the training output folder); read
            at `warm_up`.
        :param model: The reader whose hidden states the head reads; defaults to the one it was trained on.
        :param top_k: K, passages kept (defaults to the K the head was trained with).
        :param keep_order: Keep the kept passages in prompt order instead of by descending score.
        :param dtype: As for `LocalChatReader` (use the same value to share the loaded model).
        :param device: As for `LocalChatReader`.
        :param max_context_tokens: Refuse prompts longer than this (default: the model's context length).
        """
        positive_int(top_k, "top_k (K)", optional=True, hint=" (the head's K)")
        positive_int(max_context_tokens, "max_context_tokens", optional=True, hint=" (the model's context length)")
        self.head = head
        self.model = model
        self.top_k = top_k
        self.keep_order = keep_order
        self.dtype = dtype
        self.device = device
        self.max_context_tokens = max_context_tokens
        self._head: RetrievalHead | None = None
        self._model: Any = None  # the reader and its tokenizer, taken from MODEL_CACHE by warm_up
        self._tokenizer: Any = None

    def warm_up(self) -> None:
        """Read the head and take its reader from `MODEL_CACHE`, refusing a reader the head was not trained on."""
        if self._head is not None:
            return
        folder = find_head_folder(self.head)  # FileNotFoundError naming `icr2 train`
        head = RetrievalHead.load(folder)
        reader = self.model or head.config.model
        model, tokenizer = MODEL_CACHE.causal_lm(
            reader, dtype=self.dtype, device=self.device, attn_implementation="sdpa"
        )
        signature = model_signature(model)
        if head.config.model_signature and signature != head.config.model_signature:
            raise ValueError(
                f"The retrieval head at {folder} was trained on {head.config.model} "
                f"({head.config.model_signature}) but the reader {reader} is {signature}; use the head's reader."
            )
        self._head = head.to(model.device)
        self._model, self._tokenizer = model, tokenizer

    @component.output_types(documents=list[Document], report=dict)
    def run(self, documents: list[Document], query: str, top_k: int | None = None) -> dict[str, Any]:
        """
        :param documents: The corpus in context, in prompt order (meta `passage_id` as set by the corpus builder).
        :param query: The question.
        :param top_k: Overrides K for this call (checked as at init: a positive integer).
        :returns: `documents`: the kept passages, with meta `retrieval_head_score`; `report`: counts in and
            out, K, prompt tokens, and whether K was clamped to the number of passages.
        """
        import torch

        from icr2_components.rankers.head_inputs import encode_for_head, final_hidden_states

        positive_int(top_k, "top_k (K)", optional=True, hint=" (the head's K)")
        self.warm_up()
        head = self._head
        assert head is not None  # warm_up loads it
        k = override(top_k, override(self.top_k, head.config.top_k))
        report: dict[str, Any] = {"passages_in": len(documents), "top_k": k, "k_clamped": False, "prompt_tokens": 0}
        if not documents:
            logger.warning("RetrievalHeadRanker got no documents; nothing to rank.")
            report.update(passages_out=0, empty_input=True)
            return {"documents": [], "report": report}
        if k >= len(documents):
            logger.warning("K=%d is not smaller than the %d passages given; all are kept.", k, len(documents))
            report["k_clamped"] = True
        config = head.config
        encoded = encode_for_head(self._tokenizer, config.task_type, query, documents, config.query_aware)
        prompt_tokens = int(encoded.input_ids.shape[1])
        check_fits(
            prompt_tokens, context_limit(self._model, self.max_context_tokens), 0, str(self.model or config.model)
        )
        with torch.inference_mode():
            hidden = final_hidden_states(self._model, encoded.input_ids)
            scores = head(hidden, encoded.passage_spans, encoded.query_span).float().cpu().tolist()
        order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))[: min(k, len(documents))]
        if self.keep_order:
            order.sort()
        kept = [
            replace(documents[i], meta={**(documents[i].meta or {}), "retrieval_head_score": scores[i]}) for i in order
        ]
        report.update(passages_out=len(kept), prompt_tokens=prompt_tokens, empty_input=False)
        return {"documents": kept, "report": report}
