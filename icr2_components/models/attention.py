"""Attention access for any Hugging Face decoder: chosen query rows per layer and head, without a T x T matrix.

Why not ``output_attentions``: it needs eager attention, which materialises every layer's full
``heads x T x T`` weights (30 x 9 x 8192^2 floats for SmolLM2 at 8K tokens). Here the model keeps its own
sdpa / flash kernel; we tap the queries and keys that the attention module hands to that kernel (after the
rotary embedding and any q/k norm, before grouped-query expansion) and compute only the softmax rows of the
query positions we need: ``heads x P x T`` per layer, with P the handful of positions that matter.

How the tap is installed: every transformers decoder (Llama, Mistral, Qwen2, GPT-2, ... in transformers 5)
calls its attention kernel through ``ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation)``. For
each kernel a tapped model uses (``sdpa``, ``flash_attention_2``, ...) we register, once, a pass-through kernel
of our own under ``icr2_tapped_<kernel>`` with ``transformers.AttentionInterface.register`` (and the kernel's
mask builder under the same name with ``AttentionMaskInterface.register``, so the model builds the very mask it
builds without us). An ``attention_taps`` context switches only the tapped model's config to that name and
switches it back on exit: other models in the process, and ``ALL_ATTENTION_FUNCTIONS["sdpa"]`` itself, are never
touched. The pass-through first gives the tap of a registered module an :class:`AttentionCall`, then runs the
model's own kernel. A tap may observe (row capture, here) or change the call (head suppression) by returning a
replacement output.

Usage:
    >>> from icr2_components.models import MODEL_CACHE
    >>> from icr2_components.models.attention import query_attention_rows, passage_attention_scores
    >>> model, tokenizer = MODEL_CACHE.causal_lm("smollm2-135m-instruct", dtype="float32", device="cpu")
    >>> ids = tokenizer("The capital of France is Paris.", return_tensors="pt")["input_ids"]
    >>> rows = query_attention_rows(model, ids, query_positions=[-1])   # (layers, heads, 1, T)
    >>> scores = passage_attention_scores(model, ids, spans=[(0, 3), (3, 7)])   # (layers, heads, 2)
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from icr2_components.extras import extra_import
from icr2_components.models.generation_settings import decoding_arguments
from icr2_components.models.transformers_internals import builds_mask_through_registry, set_kernel_name

with extra_import("local") as torch_import:
    import torch

AGGREGATIONS = ("sum", "mean", "max")
"""How a passage's attention is summarised over its tokens (the paper sums; mean and max are options)."""


class AttentionAccessError(ValueError):
    """The model or the request cannot be served by attention access; the message says what to change."""


@dataclass
class AttentionCall:
    """One call of an attention module's kernel, as the tap sees it.

    ``query``: (batch, query_heads, q_len, head_dim); ``key``/``value``: (batch, kv_heads, kv_len, head_dim),
    both after rotary embeddings and before grouped-query expansion. ``attention_mask`` is whatever the model
    built for its kernel (None for a plain causal sdpa call, a boolean or additive 4-D tensor otherwise).
    """

    module: torch.nn.Module
    layer: int
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attention_mask: torch.Tensor | None
    scaling: float | None
    kwargs: dict[str, Any] = field(default_factory=dict)
    kernel: Callable | None = None
    """The model's own kernel, bound to the module as it sees it untapped; :meth:`run_kernel` calls it."""

    def run_kernel(self) -> Any:
        """What the model's own kernel returns for this call: ``(output, weights)``, as if no tap were installed."""
        if self.kernel is None:
            raise AttentionAccessError("This AttentionCall carries no kernel; it was not made by attention_taps.")
        return self.kernel(self.query, self.key, self.value, self.attention_mask, **self.kwargs)

    @property
    def query_heads(self) -> int:
        return int(self.query.shape[1])

    @property
    def kv_heads(self) -> int:
        return int(self.key.shape[1])


class AttentionTap(Protocol):
    """Receives each tapped attention call. Return None to let the kernel run unchanged."""

    def __call__(self, call: AttentionCall) -> Any: ...


class _StopForward(Exception):
    """Raised by a tap that has everything it needs, to skip the remaining layers."""


# ---- the registered pass-through kernels and the per-model switch -------------------------------------------

TAPPED_PREFIX = "icr2_tapped_"
"""Prefix of our registered implementations: ``icr2_tapped_sdpa`` passes through to ``sdpa``. The kernel's name
stays inside ours because transformers tests names by substring (``"flash" in name``, ``"sdpa" in name``)."""

_LOCK = threading.RLock()
_TAPS_BY_MODULE: dict[int, tuple[int, AttentionTap]] = {}
_REGISTERED: set[str] = set()  # kernels whose tapped pass-through is registered


@dataclass
class _SwitchedConfig:
    """A model config switched to a tapped implementation while one or more contexts hold it."""

    config: Any
    implementation: str
    holders: int
    kernel_config: Any  # a shallow copy naming the original implementation: what the kernel reads


_SWITCHED: dict[int, _SwitchedConfig] = {}  # id(config) -> switch


def _attention_registry():
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS


class _ModuleAsKernelSeesIt:
    """The attention module with ``config`` naming the original implementation.

    Why: the flash kernel reads ``module.config._attn_implementation`` to pick its flash library, and during a
    tapped call the config names ``icr2_tapped_flash_attention_2``. Every other attribute is the module's own.
    """

    def __init__(self, module: torch.nn.Module, kernel_config: Any) -> None:
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "config", kernel_config)

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_module"), name)


def _bound_kernel(implementation: str, module: torch.nn.Module) -> Callable:
    """The model's own kernel for ``module``, looked up now (a later re-registration of it is honoured)."""
    kernel = _attention_registry()[implementation]
    switch = _SWITCHED.get(id(getattr(module, "config", None)))
    seen = _ModuleAsKernelSeesIt(module, switch.kernel_config) if switch is not None else module

    def run(query, key, value, attention_mask, *args, **kwargs):
        return kernel(seen, query, key, value, attention_mask, *args, **kwargs)

    return run


def _make_tapped_kernel(implementation: str) -> Callable:
    def tapped_attention(module, query, key, value, attention_mask, *args, **kwargs):
        kernel = _bound_kernel(implementation, module)
        entry = _TAPS_BY_MODULE.get(id(module))
        if entry is not None:
            layer, tap = entry
            call = AttentionCall(
                module, layer, query, key, value, attention_mask, kwargs.get("scaling"), kwargs, kernel
            )
            replacement = tap(call)
            if replacement is not None:
                return replacement
        return kernel(query, key, value, attention_mask, *args, **kwargs)

    tapped_attention.__name__ = f"{TAPPED_PREFIX}{implementation}"
    return tapped_attention


def _make_tapped_mask(implementation: str) -> Callable:
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    def tapped_mask(*args, **kwargs):
        return ALL_MASK_ATTENTION_FUNCTIONS[implementation](*args, **kwargs)

    return tapped_mask


def _register(implementation: str) -> str:
    """Register the pass-through kernel (and mask builder) for ``implementation`` once; return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    name = f"{TAPPED_PREFIX}{implementation}"
    with _LOCK:
        if implementation not in _REGISTERED:
            AttentionInterface.register(name, _make_tapped_kernel(implementation))
            # transformers builds a mask only for implementations in the mask registry's global mapping;
            # mirror the kernel's membership so the tapped model gets exactly the mask (or None) it gets untapped.
            if builds_mask_through_registry(implementation):
                AttentionMaskInterface.register(name, _make_tapped_mask(implementation))
            _REGISTERED.add(implementation)
    return name


def _configs_of(model, modules: Sequence[torch.nn.Module]) -> list[Any]:
    """The distinct configs the attention modules dispatch by (the model's own config for a plain decoder)."""
    configs: dict[int, Any] = {}
    for module in modules:
        config = getattr(module, "config", None)
        config = model.config if config is None else config
        configs[id(config)] = config
    return list(configs.values())


def _implementation_of(config: Any) -> str:
    return str(getattr(config, "_attn_implementation", None) or "eager").removeprefix(TAPPED_PREFIX)


def _switch(config: Any) -> None:
    """Point ``config`` at the tapped pass-through of its own kernel (counted: two models may share a config)."""
    switch = _SWITCHED.get(id(config))
    if switch is None:
        implementation = _implementation_of(config)
        tapped = _register(implementation)
        kernel_config = copy.copy(config)
        set_kernel_name(kernel_config, implementation)
        _SWITCHED[id(config)] = _SwitchedConfig(config, implementation, 1, kernel_config)
        # Not the property: it would also rewrite the sub-configs (a vision tower's own kernel, say), which the tap
        # leaves alone (transformers_internals.set_kernel_name).
        set_kernel_name(config, tapped)
    else:
        switch.holders += 1


def _switch_back(config: Any) -> None:
    switch = _SWITCHED[id(config)]
    switch.holders -= 1
    if switch.holders == 0:
        set_kernel_name(config, switch.implementation)
        del _SWITCHED[id(config)]


def attention_implementation(model) -> str:
    """The kernel name the model dispatches to (``sdpa``, ``flash_attention_2``, ``eager``...), tapped or not."""
    return _implementation_of(model.config)


def attention_modules(model) -> list[torch.nn.Module]:
    """The self-attention modules of a decoder, in layer order.

    A module counts when its class name ends in ``Attention`` and it carries a ``layer_idx`` (every transformers
    decoder family sets one); cross-attention modules are left out.
    """
    found = []
    for _name, module in model.named_modules():
        if type(module).__name__.endswith("Attention") and hasattr(module, "layer_idx"):
            if getattr(module, "is_cross_attention", False):
                continue
            found.append(module)
    if not found:
        raise AttentionAccessError(
            f"No attention modules with a layer_idx were found in {type(model).__name__}; attention access "
            "supports transformers decoders that dispatch through ALL_ATTENTION_FUNCTIONS (Llama, Mistral, "
            "Qwen2, GPT-2, ...)."
        )
    found.sort(key=lambda module: int(module.layer_idx))
    return found


@contextmanager
def attention_taps(model, tap: AttentionTap) -> Iterator[list[torch.nn.Module]]:
    """Route every attention call of ``model`` through ``tap`` while the context is open.

    Only this model is switched to the tapped implementation, and back on exit; other models are untouched.
    Yields the tapped modules in layer order. Not re-entrant for one model: a second tap on the same modules
    raises. Eager attention is refused (its kernel is family-specific and it already offers
    ``output_attentions``): load the model with ``attn_implementation="sdpa"``.
    """
    implementation = attention_implementation(model)
    if implementation == "eager":
        raise AttentionAccessError(
            f"{type(model).__name__} runs eager attention; attention access taps sdpa/flash kernels. Load the "
            "model with attn_implementation='sdpa' (MODEL_CACHE.causal_lm(..., attn_implementation='sdpa'))."
        )
    modules = attention_modules(model)
    configs = _configs_of(model, modules)
    if any(_implementation_of(config) == "eager" for config in configs):
        raise AttentionAccessError(
            f"Some attention modules of {type(model).__name__} run eager attention; attention access taps "
            "sdpa/flash kernels. Load the model with attn_implementation='sdpa'."
        )
    with _LOCK:
        busy = [m for m in modules if id(m) in _TAPS_BY_MODULE]
        if busy:
            raise AttentionAccessError(
                "This model's attention is already tapped by another active attention_taps context; "
                "close it first (or combine both taps into one)."
            )
        for config in configs:
            _switch(config)
        for index, module in enumerate(modules):
            _TAPS_BY_MODULE[id(module)] = (index, tap)
    try:
        yield modules
    finally:
        with _LOCK:
            for module in modules:
                _TAPS_BY_MODULE.pop(id(module), None)
            for config in configs:
                _switch_back(config)


# ---- query-row computation -----------------------------------------------------------------------------------


def normalise_positions(query_positions: Sequence[int], length: int) -> list[int]:
    """Turn possibly negative positions into absolute ones, refusing positions outside ``[0, length)``."""
    if not query_positions:
        raise AttentionAccessError("query_positions is empty: give at least one position (e.g. [-1]).")
    absolute = []
    for position in query_positions:
        value = int(position) + length if int(position) < 0 else int(position)
        if not 0 <= value < length:
            raise AttentionAccessError(f"Query position {position} is outside a sequence of {length} tokens.")
        absolute.append(value)
    return absolute


def attention_rows(call: AttentionCall, positions: Sequence[int]) -> torch.Tensor:
    """Softmax rows of ``positions`` for every query head of one call: (batch, query_heads, P, kv_len), float32.

    Grouped-query attention is handled by viewing the query heads as (kv_heads, group) instead of copying the
    keys. The mask is the one the model built; when it is None the kernel ran causal, so we apply causality
    (and the module's sliding window, if it has one) ourselves.
    """
    query, key = call.query, call.key
    batch, query_heads, q_len, head_dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    if query_heads % kv_heads:
        raise AttentionAccessError(f"{query_heads} query heads do not group over {kv_heads} key/value heads.")
    group = query_heads // kv_heads
    index = torch.as_tensor(list(positions), device=query.device)
    selected = query.index_select(2, index).float()  # (B, Hq, P, D)
    scaling = call.scaling if call.scaling is not None else head_dim**-0.5
    grouped = selected.view(batch, kv_heads, group, len(positions), head_dim)
    scores = torch.matmul(grouped, key.float().unsqueeze(2).transpose(-1, -2)) * scaling  # (B, Hkv, G, P, T)
    scores = scores.view(batch, query_heads, len(positions), kv_len)
    softcap = call.kwargs.get("softcap")
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    # Query position i of this call sits at absolute position offset + i (offset > 0 only with a kv cache).
    offset = kv_len - q_len
    absolute = index + offset
    mask = call.attention_mask
    if mask is not None and mask.dim() == 4:
        rows = mask[:, :, index, :kv_len]
        scores = scores.masked_fill(~rows, float("-inf")) if rows.dtype == torch.bool else scores + rows.float()
    else:
        keys = torch.arange(kv_len, device=query.device)
        allowed = keys.unsqueeze(0) <= absolute.unsqueeze(1)  # (P, T)
        window = getattr(call.module, "sliding_window", None)
        if window:
            allowed &= keys.unsqueeze(0) > absolute.unsqueeze(1) - int(window)
        if mask is not None and mask.dim() == 2:  # flash-attention padding mask (B, T)
            allowed = allowed.unsqueeze(0) & mask[:, None, :kv_len].bool()
            scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        else:
            scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1)


class QueryRowCapture:
    """A tap that keeps the softmax rows of chosen query positions, optionally reduced per passage on the fly.

    With ``spans`` the per-layer result is (query_heads, P, passages) instead of (query_heads, P, T), so long
    inputs never hold more than one layer's rows at a time. ``layers`` restricts capture (and, with
    ``stop_early``, the forward pass ends after the last of them).
    """

    def __init__(
        self,
        positions: Sequence[int],
        spans: Sequence[tuple[int, int]] | None = None,
        aggregate: str = "sum",
        layers: Sequence[int] | None = None,
        stop_early: bool = False,
    ) -> None:
        if aggregate not in AGGREGATIONS:
            raise AttentionAccessError(f"aggregate must be one of {AGGREGATIONS}, got {aggregate!r}.")
        self.positions = list(positions)
        self.spans = list(spans) if spans is not None else None
        self.aggregate = aggregate
        self.layers = set(layers) if layers is not None else None
        self.stop_early = stop_early and self.layers is not None
        self.captured: dict[int, torch.Tensor] = {}

    def __call__(self, call: AttentionCall) -> None:
        if self.layers is not None and call.layer not in self.layers:
            return None
        rows = attention_rows(call, self.positions)[0]  # batch of one
        if self.spans is not None:
            rows = aggregate_spans(rows, self.spans, self.aggregate)
        self.captured[call.layer] = rows.cpu()
        if self.stop_early and self.layers is not None and self.layers.issubset(self.captured):
            raise _StopForward()
        return None


class GenerationRowCapture:
    """A tap for ``model.generate``: keeps, per layer, the row of the newest query position of every call.

    The prefill call contributes the last prompt token; each decoding step contributes the token it feeds
    back (a generated token). Rows are reduced over ``spans`` at once, so a step costs heads x passages.
    """

    def __init__(
        self, spans: Sequence[tuple[int, int]], aggregate: str = "sum", layers: Sequence[int] | None = None
    ) -> None:
        if aggregate not in AGGREGATIONS:
            raise AttentionAccessError(f"aggregate must be one of {AGGREGATIONS}, got {aggregate!r}.")
        self.spans = list(spans)
        self.aggregate = aggregate
        self.layers = set(layers) if layers is not None else None
        self.steps: dict[int, list[torch.Tensor]] = {}

    def __call__(self, call: AttentionCall) -> None:
        if self.layers is not None and call.layer not in self.layers:
            return None
        rows = attention_rows(call, [call.query.shape[2] - 1])[0]  # (heads, 1, kv_len)
        self.steps.setdefault(call.layer, []).append(aggregate_spans(rows, self.spans, self.aggregate).cpu())
        return None


def generation_passage_scores(
    model,
    input_ids: torch.Tensor,
    spans: Sequence[tuple[int, int]],
    max_new_tokens: int,
    aggregate: str = "sum",
    layers: Sequence[int] | None = None,
    pad_token_id: int | None = None,
    eos_token_id: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy generation that scores passages from the last prompt token and every generated token fed back.

    Returns ``(scores, generated)``: scores (layers, query_heads, passages), averaged over those query
    positions, and the generated ids (1, G) without the prompt. The rows are taken inside the generation's own
    cached forward passes, so this costs no more forward passes than the generation itself.
    """
    if not spans:
        raise AttentionAccessError("No passage spans were given: there is nothing to score.")
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    length = int(input_ids.shape[-1])
    for start, end in spans:
        if not 0 <= start < end <= length:
            raise AttentionAccessError(f"Token span ({start}, {end}) is empty or outside {length} tokens.")
    tap = GenerationRowCapture(spans, aggregate, layers)
    with attention_taps(model, tap), torch.inference_mode():
        output = model.generate(
            input_ids=input_ids.to(model.device),
            attention_mask=torch.ones_like(input_ids).to(model.device),
            max_new_tokens=max_new_tokens,
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            **decoding_arguments(),
        )
    chosen = sorted(tap.steps) if layers is None else sorted(set(layers))
    missing = [layer for layer in chosen if layer not in tap.steps]
    if missing:
        raise AttentionAccessError(f"No attention was captured for layers {missing}; the model has fewer layers.")
    scores = torch.stack([torch.cat(tap.steps[layer], dim=1).mean(dim=1) for layer in chosen])
    return scores, output[:, length:].cpu()


def aggregate_spans(rows: torch.Tensor, spans: Sequence[tuple[int, int]], aggregate: str = "sum") -> torch.Tensor:
    """Reduce the last (key) axis of ``rows`` over each ``[start, end)`` token span: (..., len(spans))."""
    if aggregate not in AGGREGATIONS:
        raise AttentionAccessError(f"aggregate must be one of {AGGREGATIONS}, got {aggregate!r}.")
    width = rows.shape[-1]
    reduced = []
    for start, end in spans:
        if not 0 <= start < end <= width:
            raise AttentionAccessError(f"Token span ({start}, {end}) is empty or outside {width} tokens.")
        piece = rows[..., start:end]
        if aggregate == "sum":
            reduced.append(piece.sum(-1))
        elif aggregate == "mean":
            reduced.append(piece.mean(-1))
        else:
            reduced.append(piece.amax(-1))
    return torch.stack(reduced, dim=-1)


def _forward(model, input_ids: torch.Tensor, tap: QueryRowCapture) -> None:
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    if input_ids.shape[0] != 1:
        raise AttentionAccessError(
            f"Attention access reads one sequence at a time; got a batch of {input_ids.shape[0]}."
        )
    # the tap stops the forward pass once it has what it needs
    with attention_taps(model, tap), torch.inference_mode(), contextlib.suppress(_StopForward):
        # logits_to_keep=1: the full-vocabulary logits of every position (T x 49K floats for SmolLM2) are
        # never needed here.
        model(input_ids=input_ids.to(model.device), use_cache=False, logits_to_keep=1)


def _stack(captured: dict[int, torch.Tensor], layers: Sequence[int]) -> torch.Tensor:
    missing = [layer for layer in layers if layer not in captured]
    if missing:
        raise AttentionAccessError(f"No attention was captured for layers {missing}; the model has fewer layers.")
    return torch.stack([captured[layer] for layer in layers])


def query_attention_rows(
    model, input_ids: torch.Tensor, query_positions: Sequence[int] = (-1,), layers: Sequence[int] | None = None
) -> torch.Tensor:
    """Attention rows of ``query_positions`` over all keys: (layers, query_heads, P, T), float32 on CPU."""
    length = int(input_ids.shape[-1])
    positions = normalise_positions(query_positions, length)
    tap = QueryRowCapture(positions, layers=layers, stop_early=layers is not None)
    _forward(model, input_ids, tap)
    return _stack(tap.captured, sorted(tap.captured) if layers is None else sorted(set(layers)))


def passage_attention_scores(
    model,
    input_ids: torch.Tensor,
    spans: Sequence[tuple[int, int]],
    query_positions: Sequence[int] = (-1,),
    aggregate: str = "sum",
    layers: Sequence[int] | None = None,
) -> torch.Tensor:
    """Per-passage attention from the query positions: (layers, query_heads, passages), float32 on CPU.

    Each passage's score is its ``aggregate`` over its token span, averaged over the query positions (with
    several generated tokens as queries, every one of them votes equally).
    """
    if not spans:
        raise AttentionAccessError("No passage spans were given: there is nothing to score.")
    length = int(input_ids.shape[-1])
    positions = normalise_positions(query_positions, length)
    tap = QueryRowCapture(positions, spans=spans, aggregate=aggregate, layers=layers, stop_early=layers is not None)
    _forward(model, input_ids, tap)
    stacked = _stack(tap.captured, sorted(tap.captured) if layers is None else sorted(set(layers)))
    return stacked.mean(dim=2)


def token_spans_from_char_spans(
    offsets: Sequence[tuple[int, int]], char_spans: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Map character spans of a text to token spans ``[first, last + 1)`` using a fast tokenizer's offsets.

    A token belongs to a span when its characters overlap it. A span that no token covers is an error (the
    text and the offsets disagree), never a silent empty passage.
    """
    token_spans = []
    for start, end in char_spans:
        inside = [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]
        if not inside:
            raise AttentionAccessError(
                f"No token covers characters [{start}, {end}); were the offsets made from this text?"
            )
        token_spans.append((inside[0], inside[-1] + 1))
    return token_spans
