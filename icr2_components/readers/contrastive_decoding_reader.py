"""ContextAwareDecodingReader: greedy decoding with CAD, ACD or COIECD over two cached forward passes per step."""

from __future__ import annotations

import time
from typing import Any

import torch
from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from icr2_components.errors import MissingContextError
from icr2_components.readers.context_aware_decoding import (
    COIECD_ALPHA,
    COIECD_BOUND_RATIO,
    TECHNIQUES,
    apply_technique,
    check_coiecd_settings,
)
from icr2_components.readers.local_chat_reader import LocalChatReader, messages_to_dicts

PASS_MODES = ("separate", "batched")


@component
class ContextAwareDecodingReader(LocalChatReader):
    """
    A reader that decodes with a context-aware technique: `cad`, `acd`, `coiecd` (or `none`, plain greedy).

    Every step runs the model on the prompt with the context (`messages`) and on the same question without it
    (`memory_messages`), each with its own KV cache, and picks the next token from the two next-token logits
    with the rule in `icr2_components.readers.context_aware_decoding` (formulas and sources there). The chosen
    token is fed to both sequences. Greedy only. Two forward passes per token, not two generations: the prompts
    are prefilled once and each step costs two one-token passes.

    `passes="separate"` (default) steps two batch-of-one caches together, so the context pass is computed
    exactly as the plain reader computes it (weight 0 reproduces `LocalChatReader` bit for bit);
    `passes="batched"` runs one batch of two left-padded sequences (one call per step; padding can change the
    last float bits, so weight 0 matches the plain reader's text only almost always).

    The model comes from the shared `MODEL_CACHE` (one copy with every other component naming it). As a
    `LocalChatReader` subclass it also takes `icr2 compare --max-new-tokens`.

    Usage example:
    ```python
    from haystack.dataclasses import ChatMessage
    from icr2_components.readers import ContextAwareDecodingReader

    reader = ContextAwareDecodingReader(model="smollm2-135m-instruct", technique="acd", alpha=1.0, max_new_tokens=16)
    reader.warm_up()
    context = [ChatMessage.from_user("Context: The Eiffel Tower is in Rome.\\nQuestion: Where is the Eiffel Tower?")]
    memory = [ChatMessage.from_user("Question: Where is the Eiffel Tower?")]
    print(reader.run(messages=context, memory_messages=memory)["replies"][0].text)
    ```
    """

    def __init__(
        self,
        model: str = "smollm2-135m-instruct",
        technique: str = "cad",
        alpha: float = 0.5,
        coiecd_alpha: float = COIECD_ALPHA,
        coiecd_bound_ratio: float = COIECD_BOUND_RATIO,
        passes: str = "separate",
        max_new_tokens: int = 64,
        dtype: str = "auto",
        device: str | None = None,
        attn_implementation: str | None = "sdpa",
        max_input_tokens: int | None = None,
    ) -> None:
        """
        :param model: Hugging Face id, local path or bundled alias.
        :param technique: `cad`, `acd`, `coiecd` or `none` (plain greedy decoding of `messages`).
        :param alpha: The technique's weight (>= 0); 0 is plain decoding. CAD: its contrast strength. ACD and
            COIECD: the interpolation between plain decoding (0) and the paper's rule (1).
        :param coiecd_alpha: COIECD only: the paper's alpha (>= 0), the weight of the contextual contrastive term
            ``log p_c - log p_m`` in both of its resolutions (conflicting and non-conflicting tokens).
        :param coiecd_bound_ratio: COIECD only: the paper's lambda (>= 1), the ratio of its constraint's bounds to
            the extremes; 1 detects no conflict, larger values flag more tokens. Defaults are the authors' code's.
        :param passes: `separate` (two batch-of-one caches, exact) or `batched` (one left-padded batch of two).
        :param max_new_tokens: Most tokens generated per reply.
        :param dtype: `auto`, `float32`, `float16` or `bfloat16`.
        :param device: `cpu`, `cuda`...; the best available by default.
        :param attn_implementation: `sdpa`, `eager` or `flash_attention_2`.
        :param max_input_tokens: Refuse prompts longer than this (default: the model's context length).
        """
        LocalChatReader.__init__(self, model=model, max_new_tokens=max_new_tokens, do_sample=False, dtype=dtype, device=device,
                         attn_implementation=attn_implementation, max_input_tokens=max_input_tokens)
        self._check_settings(technique, alpha, coiecd_alpha, coiecd_bound_ratio)
        if passes not in PASS_MODES:
            raise ValueError(f"passes must be one of {list(PASS_MODES)}, got {passes!r}.")
        self.technique = technique
        self.alpha = float(alpha)
        self.coiecd_alpha = float(coiecd_alpha)
        self.coiecd_bound_ratio = float(coiecd_bound_ratio)
        self.passes = passes

    @staticmethod
    def _check_settings(technique: str, alpha: float, coiecd_alpha: float, coiecd_bound_ratio: float) -> None:
        if technique not in TECHNIQUES:
            raise ValueError(f"Unknown technique {technique!r}; choose one of {list(TECHNIQUES)}.")
        if not isinstance(alpha, (int, float)) or alpha < 0:
            raise ValueError(f"alpha must be a number >= 0 (0 = plain decoding), got {alpha!r}.")
        check_coiecd_settings(coiecd_alpha, coiecd_bound_ratio)

    # ---- decoding -------------------------------------------------------------------------------------------

    def _eos_ids(self) -> set[int]:
        eos = self._model.generation_config.eos_token_id
        if eos is None:
            eos = self._tokenizer.eos_token_id
        return set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}

    def _forward(self, input_ids, cache, **kwargs):
        output = self._model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1, **kwargs)
        return output.logits[:, -1, :].float(), output.past_key_values

    def _decode_separate(self, context_ids, memory_ids, technique, alpha, coiecd, budget):
        from transformers import DynamicCache

        z_c, cache_c = self._forward(context_ids, DynamicCache(config=self._model.config))
        z_m, cache_m = self._forward(memory_ids, DynamicCache(config=self._model.config))
        return self._loop(z_c, z_m, technique, alpha, coiecd, budget,
                          lambda token: (self._forward(token, cache_c)[0], self._forward(token, cache_m)[0]))

    def _decode_batched(self, context_ids, memory_ids, technique, alpha, coiecd, budget):
        from transformers import DynamicCache

        width = max(context_ids.shape[1], memory_ids.shape[1])
        pad = self._tokenizer.pad_token_id
        rows, masks = [], []
        for ids in (context_ids, memory_ids):
            missing = width - ids.shape[1]
            rows.append(torch.cat([torch.full((1, missing), pad, dtype=ids.dtype, device=ids.device), ids], dim=1))
            masks.append(torch.cat([torch.zeros(1, missing, dtype=torch.long, device=ids.device),
                                    torch.ones(1, ids.shape[1], dtype=torch.long, device=ids.device)], dim=1))
        input_ids, mask = torch.cat(rows), torch.cat(masks)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        cache = DynamicCache(config=self._model.config)
        logits, cache = self._forward(input_ids, cache, attention_mask=mask, position_ids=positions)
        state = {"mask": mask, "next": positions[:, -1:] + 1}

        def step(token):
            state["mask"] = torch.cat([state["mask"], torch.ones_like(state["mask"][:, :1])], dim=1)
            out, _ = self._forward(token.expand(2, 1), cache, attention_mask=state["mask"], position_ids=state["next"])
            state["next"] = state["next"] + 1
            return out[0:1], out[1:2]

        return self._loop(logits[0:1], logits[1:2], technique, alpha, coiecd, budget, step)

    def _loop(self, z_c, z_m, technique, alpha, coiecd, budget, step):
        eos = self._eos_ids()
        tokens: list[int] = []
        diagnostics: dict[str, float] = {}
        for index in range(budget):
            logits, stats = apply_technique(technique, z_c, z_m, alpha, **coiecd)
            for key, value in stats.items():
                diagnostics[key] = diagnostics.get(key, 0.0) + value
            token = int(logits[0].argmax())
            tokens.append(token)
            if token in eos or index == budget - 1:
                break
            z_c, z_m = step(torch.tensor([[token]], device=self._model.device))
        steps = max(len(tokens), 1)
        return tokens, {key: value / steps for key, value in diagnostics.items()}

    # ---- component API --------------------------------------------------------------------------------------

    @component.output_types(replies=list[ChatMessage])
    def run(
        self,
        messages: list[ChatMessage],
        memory_messages: list[ChatMessage] | None = None,
        technique: str | None = None,
        alpha: float | None = None,
        coiecd_alpha: float | None = None,
        coiecd_bound_ratio: float | None = None,
        max_new_tokens: int | None = None,
    ) -> dict[str, Any]:
        """
        :param messages: The prompt with the context (as the plain reader would get it).
        :param memory_messages: The same question without the context; required by every technique but `none`.
        :param technique: Overrides the init value for this call.
        :param alpha: Overrides the init value for this call.
        :param coiecd_alpha: Overrides the init value for this call.
        :param coiecd_bound_ratio: Overrides the init value for this call.
        :param max_new_tokens: Overrides the init value for this call.
        :returns: `replies`: one assistant message; its meta has `technique`, `alpha`, `prompt_tokens`,
            `memory_prompt_tokens`, `completion_tokens`, `latency_s` and the technique's mean step diagnostics
            (`acd_context_weight`; COIECD: `conflict`, the share of generated tokens that violated its constraint,
            with `coiecd_alpha` and `coiecd_bound_ratio`).
        """
        technique = self.technique if technique is None else technique
        alpha = self.alpha if alpha is None else float(alpha)
        coiecd = {
            "coiecd_alpha": self.coiecd_alpha if coiecd_alpha is None else float(coiecd_alpha),
            "coiecd_bound_ratio": self.coiecd_bound_ratio if coiecd_bound_ratio is None else float(coiecd_bound_ratio),
        }
        self._check_settings(technique, alpha, **coiecd)
        if not messages:
            raise ValueError("ContextAwareDecodingReader.run needs at least one message.")
        budget = max_new_tokens or self.max_new_tokens
        if budget < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {budget}.")
        if technique == "none":
            result = LocalChatReader.run(self, messages=messages, max_new_tokens=budget)
            result["replies"][0].meta.update(technique="none", alpha=0.0)
            return result
        if not memory_messages:
            raise MissingContextError(
                f"Technique {technique!r} contrasts the prompt with its context against the same question without "
                "it, but no memory_messages were given. Connect a prompt builder rendering the question alone "
                "(pipelines/cmt_cad.yaml does) or use technique='none'."
            )
        if messages_to_dicts(messages) == messages_to_dicts(memory_messages):
            raise MissingContextError(
                f"Technique {technique!r} was run without a context: the prompt and the memory prompt are identical. "
                "Give the passages to the context prompt builder (an empty retrieval leaves nothing to contrast)."
            )
        self.warm_up()
        device = self._model.device
        context_ids = self.encode(messages, budget)["input_ids"].to(device)
        memory_ids = self.encode(memory_messages, budget)["input_ids"].to(device)
        decode = self._decode_separate if self.passes == "separate" else self._decode_batched
        start = time.perf_counter()
        with torch.inference_mode():
            tokens, diagnostics = decode(context_ids, memory_ids, technique, alpha, coiecd, budget)
        text = self._tokenizer.decode(tokens, skip_special_tokens=True).strip()
        meta = {
            "model": self.model,
            "technique": technique,
            "alpha": alpha,
            "prompt_tokens": int(context_ids.shape[1]),
            "memory_prompt_tokens": int(memory_ids.shape[1]),
            "completion_tokens": len(tokens),
            "latency_s": time.perf_counter() - start,
            **{key: round(value, 6) for key, value in diagnostics.items()},
        }
        if technique == "coiecd":
            meta.update(coiecd)
        return {"replies": [ChatMessage.from_assistant(text, meta=meta)]}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, **self.loading_settings(), technique=self.technique, alpha=self.alpha, coiecd_alpha=self.coiecd_alpha,
            coiecd_bound_ratio=self.coiecd_bound_ratio, passes=self.passes,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ContextAwareDecodingReader":
        if "threshold" in (data.get("init_parameters") or {}):
            # YAMLs written before COIECD followed the paper carry the old simplification's entropy threshold
            raise ValueError(
                "ContextAwareDecodingReader no longer takes `threshold` (the entropy drop of an earlier, simplified "
                "COIECD). Remove it from the YAML; COIECD now takes `coiecd_alpha` (the paper's alpha) and "
                "`coiecd_bound_ratio` (the paper's lambda)."
            )
        return default_from_dict(cls, data)
