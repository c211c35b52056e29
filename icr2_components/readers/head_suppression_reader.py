"""HeadSuppressionReader: PH3 (+context / +memory) as a reader that generates with chosen heads suppressed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from haystack import component
from haystack.dataclasses import ChatMessage

from icr2_components.models.introspection import model_signature
from icr2_components.models.local_chat_model import LocalChatModel, check_max_new_tokens
from icr2_components.parameters import message_list, non_negative_int, number_between, one_of, override

if TYPE_CHECKING:
    from icr2_components.artifacts.ph3_heads import PH3HeadArtifact

DIRECTIONS = ("context", "memory")


@component
class HeadSuppressionReader:
    """
    PH3 as a reader: generates (greedy) while the outputs of chosen attention heads are removed before `o_proj`.

    PH3 is Jin et al. (2024), "Cutting Off the Head Ends the Conflict: A Mechanism for Interpreting and Mitigating
    Knowledge Conflicts in Language Models", https://arxiv.org/abs/2402.18154; CUB (Hagström et al., 2025,
    https://arxiv.org/abs/2505.16518) benchmarks it as PH3 +context and PH3 +memory.

    `direction="context"` (PH3 +context) suppresses the artifact's top `num_heads` *memory* heads, so the
    answer leans on the context; `direction="memory"` (PH3 +memory) suppresses its top *context* heads. The
    heads come from a PH3 artifact (`icr2_components.filters.probing.ph3_probing`) or are given explicitly as
    `heads=[[layer, head], ...]`. `num_heads=0` is the plain reader. Suppression goes through the attention
    access's kernel tap (`icr2_components.models.head_suppression`) and lasts only for the call; the model is the
    shared `MODEL_CACHE` copy, so do not run another component on the same model concurrently with this one.

    Usage example:
    ```python
    from haystack.dataclasses import ChatMessage
    from icr2_components.readers import HeadSuppressionReader

    reader = HeadSuppressionReader(model="smollm2-135m-instruct", artifact="bench/results/ph3_heads_smollm2.json",
                                   direction="context", num_heads=4, max_new_tokens=16)
    reader.warm_up()
    print(reader.run(messages=[ChatMessage.from_user("Context: ...\\nQuestion: ...")])["replies"][0].text)
    ```
    """

    model_needs: ClassVar[dict[str, str]] = {
        "weights": "suppresses attention heads (PH3) inside the model, which needs the weights",
    }
    """What this component needs of the model: a backend kind that does not provide it (a served one) refuses it."""
    backend_role: ClassVar[str] = "white_box"  # on a local backend naming another model, it loads that model

    unbatched_because: ClassVar[str] = (
        "generates through an attention-kernel tap that scales chosen heads' outputs (models/head_suppression.py); "
        "the scaling itself is per head, not per prompt, but the tap has only been checked on unpadded single prompts, "
        "so padded batches are not run through it"
    )
    """Why `icr2 compare --batch-size` answers with this reader one prompt at a time (no `run_batch`)."""

    def __init__(
        self,
        model: str = "smollm2-135m-instruct",
        artifact: str | None = None,
        direction: str = "context",
        num_heads: int = 4,
        heads: list[list[int]] | None = None,
        scale: float = 0.0,
        max_new_tokens: int = 64,
        dtype: str = "auto",
        device: str | None = None,
        attn_implementation: str | None = "sdpa",
        max_input_tokens: int | None = None,
    ) -> None:
        """
        :param model: Hugging Face id, local path or bundled alias (the model the artifact was probed on).
        :param artifact: A PH3 head artifact (JSON); not needed with `heads`.
        :param direction: `context` (suppress memory heads) or `memory` (suppress context heads).
        :param num_heads: How many of the artifact's ranked heads to suppress (0: none).
        :param heads: Explicit `[[layer, head], ...]` to suppress instead of an artifact's.
        :param scale: Multiplier of the suppressed heads' outputs: 0 removes them (PH3), 1 leaves them.
        :param max_new_tokens: Most tokens generated per reply.
        :param dtype: `auto`, `float32`, `float16` or `bfloat16`.
        :param device: `cpu`, `cuda`...; the best available by default.
        :param attn_implementation: `sdpa` or `flash_attention_2` (the tap does not serve `eager`).
        :param max_input_tokens: Refuse prompts longer than this (default: the model's context length).
        """
        check_max_new_tokens(max_new_tokens)
        one_of(direction, "direction", DIRECTIONS)
        non_negative_int(num_heads, "num_heads")
        if artifact is None and heads is None and num_heads:
            raise ValueError(
                f"num_heads={num_heads} heads to suppress, but no PH3 artifact (artifact=...json) or explicit "
                "heads=[[layer, head], ...] to take them from; give one, or num_heads=0."
            )
        if heads is not None and any(not isinstance(h, (list, tuple)) or len(h) != 2 for h in heads):
            raise ValueError(f"heads must be [[layer, head], ...], got {heads!r}.")
        number_between(scale, "scale", 0, 1, hint=" (0 removes a head)")
        self.chat_model = LocalChatModel(model, dtype=dtype, device=device, attn_implementation=attn_implementation,
                                         max_input_tokens=max_input_tokens)
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.dtype = dtype
        self.device = device
        self.attn_implementation = attn_implementation
        self.max_input_tokens = max_input_tokens
        self.artifact = artifact
        self.direction = direction
        self.num_heads = num_heads
        self.heads = [list(map(int, h)) for h in heads] if heads is not None else None
        self.scale = float(scale)
        self._artifact: PH3HeadArtifact | None = None

    def warm_up(self) -> None:
        self.chat_model.load()
        if self.artifact is not None and self._artifact is None:
            from icr2_components.artifacts.ph3_heads import PH3HeadArtifact

            loaded = PH3HeadArtifact.load(self.artifact)
            loaded.check_model(self.model, model_signature(self.chat_model.model))
            self._artifact = loaded

    def chosen_heads(self, direction: str | None = None, num_heads: int | None = None) -> list[tuple[int, int]]:
        """The heads a call suppresses (checked against the model: out-of-range indices raise)."""
        from icr2_components.models.head_suppression import check_heads

        self.warm_up()
        direction = one_of(override(direction, self.direction), "direction", DIRECTIONS)
        count = non_negative_int(override(num_heads, self.num_heads), "num_heads")
        if self.heads is not None:
            return check_heads(self.chat_model.model, self.heads[:count] if num_heads is not None else self.heads)
        if count == 0:
            return []
        if self._artifact is None:
            raise ValueError(f"num_heads={count} heads to suppress, but the reader has no PH3 artifact "
                             "(artifact=...json) or explicit heads=[[layer, head], ...]; give one, or num_heads=0.")
        return check_heads(self.chat_model.model, self._artifact.heads_to_suppress(direction, count))

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], direction: str | None = None, num_heads: int | None = None,
            max_new_tokens: int | None = None) -> dict[str, Any]:
        """
        :param messages: The conversation (the prompt with its context).
        :param direction: Overrides the init value for this call (each override is checked as at init).
        :param num_heads: Overrides the init value for this call.
        :param max_new_tokens: Overrides the init value for this call.
        :returns: `replies`: one assistant message, with `model`, `prompt_tokens`, `completion_tokens`,
            `latency_s`, `suppressed_heads` and `direction` in its meta.
        """
        from icr2_components.models.head_suppression import suppress_heads

        message_list(messages)
        budget = check_max_new_tokens(override(max_new_tokens, self.max_new_tokens))
        heads = self.chosen_heads(direction, num_heads)
        with suppress_heads(self.chat_model.model, heads, self.scale):
            reply = self.chat_model.reply(messages, budget)
        reply.meta.update(suppressed_heads=[list(h) for h in heads], direction=override(direction, self.direction))
        return {"replies": [reply]}
