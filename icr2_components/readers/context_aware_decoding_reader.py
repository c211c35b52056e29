"""ContextAwareDecodingReader: greedy decoding with a registered decoding rule (CAD, ACD, COIECD...) over two cached
forward passes per step."""

from __future__ import annotations

import dataclasses
import inspect
import math
import time
import typing
from typing import Any, ClassVar

from haystack import component, default_to_dict
from haystack.dataclasses import ChatMessage

from icr2_components.errors import MissingContextError
from icr2_components.extras import extra_import
from icr2_components.models.cache_names import forward_cache_keyword, output_cache
from icr2_components.models.chat_messages import messages_to_dicts
from icr2_components.models.local_chat_model import LocalChatModel, check_max_new_tokens
from icr2_components.parameters import message_list, override
from icr2_components.readers.decoding_rules import DecodingRule
from icr2_components.readers.decoding_rules.registry import decoding_rule_class, decoding_rule_names
from icr2_components.strict_mapping import check_known_keys

with extra_import("local") as torch_import:
    import torch

PASS_MODES = ("separate", "batched")

PLAIN_DECODING = "none"
"""The technique that applies no rule: plain greedy decoding of `messages` (no memory prompt needed)."""


def technique_names() -> list[str]:
    """Every value `technique` takes: plain decoding and the registered rules."""
    return [PLAIN_DECODING, *decoding_rule_names()]


def rule_parameter_keywords() -> dict[str, tuple[str, str]]:
    """``{"<rule>_<field>": (rule, field)}`` for every field of every registered rule's parameters."""
    keywords = {}
    for name in decoding_rule_names():
        for field in dataclasses.fields(decoding_rule_class(name).parameters_class):
            keywords[f"{name}_{field.name}"] = (name, field.name)
    return keywords


def _check_technique(technique: str) -> None:
    if technique not in technique_names():
        raise ValueError(f"Unknown technique {technique!r}; choose one of {technique_names()}.")


def _check_alpha(alpha: float) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha must be a number >= 0 (0 = plain decoding), got {alpha!r}.")


@component
class ContextAwareDecodingReader:
    """
    A reader that decodes with a context-aware decoding rule: `cad`, `acd`, `coiecd`, any rule registered with
    `register_decoding_rule`, or `none` (plain greedy).

    The built-in rules are the context-aware decoding techniques CUB (Hagström et al., 2025, "CUB: Benchmarking
    Context Utilisation Techniques for Language Models", https://arxiv.org/abs/2505.16518) compares:
    CAD (Shi et al., 2023, https://arxiv.org/abs/2305.14739), ACD (Kim et al., 2024,
    https://arxiv.org/abs/2409.07394) and COIECD (Yuan et al., 2024, https://arxiv.org/abs/2402.11893); formulas
    and sources in `icr2_components.readers.decoding_rules`, one module per rule.

    Every step runs the model on the prompt with the context (`messages`) and on the same question without it
    (`memory_messages`), each with its own KV cache, and picks the next token from the two next-token logits
    with the rule. The chosen token is fed to both sequences. Greedy only. Two forward passes per token, not two
    generations: the prompts are prefilled once and each step costs two one-token passes.

    `alpha` is the rule's weight, common to every rule: 0 is plain decoding. A rule's own parameters are
    keywords named `<rule>_<parameter>` (`coiecd_alpha`, `coiecd_bound_ratio`), in `__init__`, in YAML and as
    optional `run` inputs; each rule's parameters class checks them.

    `passes="separate"` (default) steps two batch-of-one caches together, so the context pass is computed
    exactly as the plain reader computes it (weight 0 reproduces `LocalChatReader` bit for bit);
    `passes="batched"` runs one batch of two left-padded sequences (one call per step; padding can change the
    last float bits, so weight 0 matches the plain reader's text only almost always).

    The model comes from the shared `MODEL_CACHE` (one copy with every other component naming it).

    Usage example:
    ```python
    from haystack.dataclasses import ChatMessage
    from icr2_components.readers import ContextAwareDecodingReader

    reader = ContextAwareDecodingReader(model="smollm2-135m-instruct", technique="coiecd", alpha=1.0,
                                        coiecd_bound_ratio=4.0, max_new_tokens=16)
    reader.warm_up()
    context = [ChatMessage.from_user("Context: The Eiffel Tower is in Rome.\\nQuestion: Where is the Eiffel Tower?")]
    memory = [ChatMessage.from_user("Question: Where is the Eiffel Tower?")]
    print(reader.run(messages=context, memory_messages=memory)["replies"][0].text)
    ```
    """

    model_needs: ClassVar[dict[str, str]] = {
        "weights": "contrasts the next-token distributions with and without the context at every step, "
        "which needs the full logits",
    }
    """What this component needs of the model: a backend kind that does not provide it (a served one) refuses it."""
    backend_role: ClassVar[str] = "white_box"  # on a local backend naming another model, it loads that model

    unbatched_because: ClassVar[str] = (
        "decodes in its own loop, one prompt at a time: every step combines that prompt's next-token logits with and "
        "without its context (two KV caches, and the rule's own per-prompt state such as COIECD's entropy bounds), "
        "and the batch dimension already carries those two passes (pass_mode='batched')"
    )
    """Why `icr2 compare --batch-size` answers with this reader one prompt at a time (no `run_batch`)."""

    def __init__(
        self,
        model: str = "smollm2-135m-instruct",
        technique: str = "cad",
        alpha: float = 0.5,
        passes: str = "separate",
        max_new_tokens: int = 64,
        dtype: str = "auto",
        device: str | None = None,
        attn_implementation: str | None = "sdpa",
        max_input_tokens: int | None = None,
        **rule_parameters: Any,
    ) -> None:
        """
        :param model: Hugging Face id, local path or bundled alias.
        :param technique: A registered rule's name (`cad`, `acd`, `coiecd`...) or `none` (plain greedy decoding
            of `messages`).
        :param alpha: The rule's weight (>= 0); 0 is plain decoding. CAD: its contrast strength. ACD and
            COIECD: the interpolation between plain decoding (0) and the paper's rule (1).
        :param passes: `separate` (two batch-of-one caches, exact) or `batched` (one left-padded batch of two).
        :param max_new_tokens: Most tokens generated per reply.
        :param dtype: `auto`, `float32`, `float16` or `bfloat16`.
        :param device: `cpu`, `cuda`...; the best available by default.
        :param attn_implementation: `sdpa`, `eager` or `flash_attention_2`.
        :param max_input_tokens: Refuse prompts longer than this (default: the model's context length).
        :param rule_parameters: A rule's own parameters as `<rule>_<parameter>=value`; COIECD's are
            `coiecd_alpha` (the paper's alpha, >= 0, the weight of the contextual contrastive term) and
            `coiecd_bound_ratio` (the paper's lambda, >= 1; 1 detects no conflict). Defaults are each rule's.
        """
        _check_technique(technique)
        _check_alpha(alpha)
        if passes not in PASS_MODES:
            raise ValueError(f"passes must be one of {list(PASS_MODES)}, got {passes!r}.")
        check_max_new_tokens(max_new_tokens)
        keywords = rule_parameter_keywords()
        self.chat_model = LocalChatModel(model, dtype=dtype, device=device, attn_implementation=attn_implementation,
                                         max_input_tokens=max_input_tokens)
        self.model = model
        self.technique = technique
        self.alpha = float(alpha)
        self.passes = passes
        self.max_new_tokens = max_new_tokens
        self.dtype = dtype
        self.device = device
        self.attn_implementation = attn_implementation
        self.max_input_tokens = max_input_tokens
        # the chosen rule's parameters are always stated (defaults filled), so a saved YAML says what ran
        chosen = {key: None for key, (rule, _) in keywords.items() if rule == technique}
        self.rule_parameters = self._checked_rule_parameters({**chosen, **rule_parameters}, keep_defaults=True)
        for key, (rule, field) in keywords.items():
            hint = typing.get_type_hints(decoding_rule_class(rule).parameters_class)[field]
            component.set_input_type(self, key, hint | None, default=None)

    def warm_up(self) -> None:
        self.chat_model.load()

    # ---- rule parameters ------------------------------------------------------------------------------------

    @staticmethod
    def _checked_rule_parameters(values: dict[str, Any], keep_defaults: bool = False) -> dict[str, Any]:
        """``values`` (``<rule>_<field>`` keywords; None = the rule's default when ``keep_defaults``, else
        dropped) checked by each rule's parameters class, as the class normalises them."""
        keywords = rule_parameter_keywords()
        check_known_keys(values, keywords, "ContextAwareDecodingReader", what="parameters",
                         hint="A decoding rule's own parameters are named <rule>_<parameter>.")
        by_rule: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            if value is not None or keep_defaults:
                rule, field = keywords[key]
                by_rule.setdefault(rule, {})[field] = value
        checked = {}
        for rule, fields in by_rule.items():
            given = {field: value for field, value in fields.items() if value is not None}
            parameters = decoding_rule_class(rule).parameters_class(**given)
            checked.update({f"{rule}_{field}": getattr(parameters, field) for field in fields})
        return checked

    def _rule(self, technique: str, overrides: dict[str, Any]) -> DecodingRule:
        """The rule ``technique`` with the init parameters, updated by this call's ``overrides``."""
        rule_class = decoding_rule_class(technique)
        values = {**self.rule_parameters, **overrides}
        given = {
            field.name: values[f"{technique}_{field.name}"]
            for field in dataclasses.fields(rule_class.parameters_class)
            if f"{technique}_{field.name}" in values
        }
        return rule_class(rule_class.parameters_class(**given))

    # ---- decoding -------------------------------------------------------------------------------------------

    def _forward(self, input_ids, cache, **kwargs):
        model = self.chat_model.model
        output = model(input_ids=input_ids, use_cache=True, logits_to_keep=1,
                       **{forward_cache_keyword(model): cache}, **kwargs)
        return output.logits[:, -1, :].float(), output_cache(output)

    def _decode_separate(self, context_ids, memory_ids, rule, alpha, budget):
        from transformers import DynamicCache

        config = self.chat_model.model.config
        z_c, cache_c = self._forward(context_ids, DynamicCache(config=config))
        z_m, cache_m = self._forward(memory_ids, DynamicCache(config=config))
        return self._loop(z_c, z_m, rule, alpha, budget,
                          lambda token: (self._forward(token, cache_c)[0], self._forward(token, cache_m)[0]))

    def _decode_batched(self, context_ids, memory_ids, rule, alpha, budget):
        from transformers import DynamicCache

        width = max(context_ids.shape[1], memory_ids.shape[1])
        pad = self.chat_model.tokenizer.pad_token_id
        rows, masks = [], []
        for ids in (context_ids, memory_ids):
            missing = width - ids.shape[1]
            rows.append(torch.cat([torch.full((1, missing), pad, dtype=ids.dtype, device=ids.device), ids], dim=1))
            masks.append(torch.cat([torch.zeros(1, missing, dtype=torch.long, device=ids.device),
                                    torch.ones(1, ids.shape[1], dtype=torch.long, device=ids.device)], dim=1))
        input_ids, mask = torch.cat(rows), torch.cat(masks)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        cache = DynamicCache(config=self.chat_model.model.config)
        logits, cache = self._forward(input_ids, cache, attention_mask=mask, position_ids=positions)
        state = {"mask": mask, "next": positions[:, -1:] + 1}

        def step(token):
            state["mask"] = torch.cat([state["mask"], torch.ones_like(state["mask"][:, :1])], dim=1)
            out, _ = self._forward(token.expand(2, 1), cache, attention_mask=state["mask"], position_ids=state["next"])
            state["next"] = state["next"] + 1
            return out[0:1], out[1:2]

        return self._loop(logits[0:1], logits[1:2], rule, alpha, budget, step)

    def _loop(self, z_c, z_m, rule: DecodingRule, alpha: float, budget: int, step):
        eos = self.chat_model.eos_token_ids()
        tokens: list[int] = []
        diagnostics: dict[str, float] = {}
        for index in range(budget):
            logits, stats = rule.combine(z_c, z_m, alpha)
            for key, value in stats.items():
                diagnostics[key] = diagnostics.get(key, 0.0) + value
            token = int(logits[0].argmax())
            tokens.append(token)
            if token in eos or index == budget - 1:
                break
            z_c, z_m = step(torch.tensor([[token]], device=self.chat_model.model.device))
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
        max_new_tokens: int | None = None,
        **rule_parameters: Any,
    ) -> dict[str, Any]:
        """
        :param messages: The prompt with the context (as the plain reader would get it).
        :param memory_messages: The same question without the context; required by every technique but `none`.
        :param technique: Overrides the init value for this call.
        :param alpha: Overrides the init value for this call.
        :param max_new_tokens: Overrides the init value for this call (each override is checked as at init).
        :param rule_parameters: `<rule>_<parameter>` values overriding the init ones for this call (None: keep).
        :returns: `replies`: one assistant message; its meta has `model`, `technique`, `alpha`, `prompt_tokens`,
            `memory_prompt_tokens`, `completion_tokens`, `latency_s`, the rule's mean step diagnostics
            (ACD: `acd_context_weight`; COIECD: `conflict`, the share of generated tokens that violated its
            constraint) and the rule's own parameters as `<rule>_<parameter>` (COIECD: `coiecd_alpha`,
            `coiecd_bound_ratio`).
        """
        technique = self.technique if technique is None else technique
        _check_technique(technique)
        alpha = self.alpha if alpha is None else alpha
        _check_alpha(alpha)
        alpha = float(alpha)
        overrides = self._checked_rule_parameters(rule_parameters)
        message_list(messages)
        if memory_messages:
            message_list(memory_messages, "memory_messages")
        budget = check_max_new_tokens(override(max_new_tokens, self.max_new_tokens))
        if technique == PLAIN_DECODING:
            reply = self.chat_model.reply(messages, budget)
            reply.meta.update(technique=PLAIN_DECODING, alpha=0.0)
            return {"replies": [reply]}
        rule = self._rule(technique, overrides)
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
        device = self.chat_model.model.device
        context_ids = self.chat_model.encode(messages, budget)["input_ids"].to(device)
        memory_ids = self.chat_model.encode(memory_messages, budget)["input_ids"].to(device)
        decode = self._decode_separate if self.passes == "separate" else self._decode_batched
        start = time.perf_counter()
        with torch.inference_mode():
            tokens, diagnostics = decode(context_ids, memory_ids, rule, alpha, budget)
        text = self.chat_model.tokenizer.decode(tokens, skip_special_tokens=True).strip()
        meta = {
            "model": self.model,
            "technique": technique,
            "alpha": alpha,
            "prompt_tokens": int(context_ids.shape[1]),
            "memory_prompt_tokens": int(memory_ids.shape[1]),
            "completion_tokens": len(tokens),
            "latency_s": time.perf_counter() - start,
            **{key: round(value, 6) for key, value in diagnostics.items()},
            **{f"{technique}_{field.name}": getattr(rule.parameters, field.name)
               for field in dataclasses.fields(rule.parameters)},
        }
        return {"replies": [ChatMessage.from_assistant(text, meta=meta)]}

    def to_dict(self) -> dict[str, Any]:
        """Haystack's default serialisation plus the rule parameters, which arrive as ``**keywords`` that the
        default (reading ``__init__``'s named parameters) does not see."""
        named = [name for name, parameter in inspect.signature(type(self).__init__).parameters.items()
                 if name != "self" and parameter.kind is not inspect.Parameter.VAR_KEYWORD]
        return default_to_dict(self, **{name: getattr(self, name) for name in named}, **self.rule_parameters)
