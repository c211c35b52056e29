"""PH3 probing: which attention heads push the answer toward the context and which toward memory.

PH3 (Jin et al. 2024, "Cutting Off the Head Ends the Conflict") finds *memory heads* and *context heads* by
path patching on conflicting instances and prunes them (PH3 +context: suppress memory heads; +memory: suppress
context heads). Path patching needs a forward pass per head and instance (270 heads for SmolLM2). We measure
each head's *direct effect* instead, in one forward pass per instance: the head's output at the answer position
(before ``o_proj``, through the attention access's kernel tap), projected by its slice of ``o_proj``, the final
RMSNorm (its scale taken from the actual residual, i.e. linearised) and the unembedding onto
``logit(t_context) - logit(t_memory)``, the first tokens of the context's (substituted) answer and of the memory
answer (the gold answer, which the conflicting context replaced). This is the direct path of PH3's patching
(head -> residual -> logits) without the indirect paths through later layers; an approximation, stated here.

Usage:
    >>> from icr2_components.filters.probing.ph3_probing import probe_ph3_heads, ph3_instances
    >>> instances, skips = ph3_instances(limit=8)           # conflicting contexts of the bundled NQ sample
    >>> artifact = probe_ph3_heads(model, tokenizer, instances, model_name="smollm2-135m-instruct")
    >>> artifact.save("bench/results/ph3_heads_smollm2.json")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from haystack import Document

from icr2_components.artifacts.ph3_heads import PH3HeadArtifact
from icr2_components.models.attention import AttentionAccessError, attention_modules
from icr2_components.models.head_suppression import head_outputs
from icr2_components.records import SkipReport

METHOD = "direct_logit_attribution"


@dataclass
class PH3Instance:
    """A question with a context whose answer conflicts with memory: ``context_answer`` vs ``memory_answer``."""

    id: str
    query: str
    documents: list[Document]
    context_answer: str
    memory_answer: str


def ph3_instances(dataset: str | None = None, limit: int | None = None, offset: int = 0,
                  index: str = "kilt-sample") -> tuple[list[PH3Instance], SkipReport]:
    """Conflicting-context instances (CUB's construction, ``kilt.context_types``) of a KILT/ICR2 file."""
    from icr2_components.kilt.context_types import build_context_set
    from icr2_components.kilt.questions import answer_pool, read_compare_questions

    questions, skips, path = read_compare_questions(
        dataset, limit=None if limit is None else offset + limit, index=index
    )
    pool = answer_pool(path)
    instances = []
    for question in questions[offset:]:
        contexts = build_context_set(question.id, question.answers, question.gold_documents,
                                     question.irrelevant_candidates, pool)
        documents = contexts.documents("conflicting")
        conflicting_answer = contexts.conflicting_answer
        if documents is None or conflicting_answer is None:
            skips.skip(
                f"no conflicting context ({(contexts.reasons or {}).get('conflicting', 'not built')})",
                None,
                question.id,
            )
            continue
        instances.append(PH3Instance(question.id, question.query, documents, conflicting_answer,
                                     question.answers[0]))
    return instances, skips


def first_answer_token(tokenizer, answer: str) -> int:
    ids = tokenizer(answer.strip(), add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError(f"The answer {answer!r} has no tokens.")
    return int(ids[0])


def _final_norm(model):
    norm = getattr(model.base_model, "norm", None)
    if norm is None or not hasattr(norm, "weight"):
        raise AttentionAccessError(
            f"PH3 probing projects heads through the final RMSNorm (`model.norm`); {type(model).__name__} has none."
        )
    return norm


def head_direct_effects(model, input_ids: torch.Tensor, target: int, foil: int) -> torch.Tensor:
    """Each head's direct effect on ``logit(target) - logit(foil)`` at the last position: (layers, heads)."""
    modules = attention_modules(model)
    if not all(hasattr(m, "o_proj") for m in modules):
        raise AttentionAccessError("PH3 probing needs attention modules with an `o_proj` (Llama, Mistral, Qwen2, ...).")
    norm = _final_norm(model)
    residual: dict[str, torch.Tensor] = {}
    handle = norm.register_forward_hook(lambda _m, args, _o: residual.__setitem__("x", args[0][:, -1].detach().float()))
    try:
        outputs, _ = head_outputs(model, input_ids, positions=[-1])  # (L, 1, 1, H, d)
    finally:
        handle.remove()
    x = residual["x"][0].cpu()
    eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
    rms = torch.sqrt(x.pow(2).mean() + eps)
    unembed = model.get_output_embeddings().weight.detach().float().cpu()
    direction = norm.weight.detach().float().cpu() * (unembed[target] - unembed[foil]) / rms  # (hidden,)
    effects = []
    for layer, module in enumerate(modules):
        o_proj = cast(torch.nn.Linear, module.o_proj)  # every module has one: checked above
        weight = o_proj.weight.detach().float().cpu()  # (hidden, H * d)
        per_head = (direction @ weight).view(outputs.shape[3], outputs.shape[4])  # (H, d)
        effects.append((outputs[layer, 0, 0] * per_head).sum(-1))
    return torch.stack(effects)


def probe_ph3_heads(model, tokenizer, instances: Sequence[PH3Instance], model_name: str, rank: int = 32,
                    skips: SkipReport | None = None) -> PH3HeadArtifact:
    """Mean direct effects over ``instances`` and the ranked context and memory heads, as an artifact."""
    from icr2_components.models.chat_messages import messages_to_dicts
    from icr2_components.models.introspection import model_signature
    from icr2_components.text.templates import render_cic_prompt

    skips = skips or SkipReport(source="ph3 probing")
    total: torch.Tensor | None = None
    used: list[str] = []
    for instance in instances:
        target = first_answer_token(tokenizer, instance.context_answer)
        foil = first_answer_token(tokenizer, instance.memory_answer)
        if target == foil:
            skips.skip("context and memory answers share their first token", None, instance.id)
            continue
        messages = render_cic_prompt("qa", instance.query, instance.documents).messages
        ids = tokenizer.apply_chat_template(messages_to_dicts(messages), add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        effects = head_direct_effects(model, ids, target, foil)
        total = effects if total is None else total + effects
        used.append(instance.id)
    if total is None:  # no instance used
        raise ValueError(
            f"No instance could be probed ({skips.summary()}); give conflicting instances whose two answers differ."
        )
    scores = total / len(used)
    flat = scores.flatten()
    heads = scores.shape[1]
    rank = min(rank, flat.numel())
    context_order = torch.sort(flat, descending=True, stable=True).indices[:rank]
    memory_order = torch.sort(flat, descending=False, stable=True).indices[:rank]
    return PH3HeadArtifact(
        model=model_name,
        model_signature=model_signature(model),
        method=METHOD,
        scores=[[round(float(v), 6) for v in row] for row in scores.tolist()],
        context_heads=[[int(i) // heads, int(i) % heads] for i in context_order if flat[i] > 0],
        memory_heads=[[int(i) // heads, int(i) % heads] for i in memory_order if flat[i] < 0],
        instances=len(used),
        skipped=skips.as_dict(),
        probed_ids=used,  # icr2 compare keeps these questions out of its evaluation
    )
