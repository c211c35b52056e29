"""Joint training of the retrieval head with generation (ICR2 section 4.3, figure 9), on accelerate.

Each step, on one CiC example:

1. the reader reads the prompt; its final hidden states go to the :class:`RetrievalHead`, which scores every
   passage; ``L_ret = -mean_{z in Z*} log softmax(s)_z`` (the log-likelihood of the gold passages, eq. 2);
2. Gumbel-TopK turns the scores into a K-hot mask (hard forward, relaxed backward, temperature annealed by
   ``tau_schedule``); the reader reads prompt + direct-answer target again with every passage token's input
   embedding multiplied by its passage's mask value, so unselected passages are blanked and ``L_gen`` (the
   target's cross-entropy) has a gradient with respect to the scores;
3. ``loss = generation_weight * L_gen + retrieval_weight * L_ret`` (``loss: joint``), or either alone.

Blanking embeddings keeps positions fixed where the paper re-prompts with C* (what ``RetrievalHeadRanker``
does at inference); it is our differentiable stand-in for that re-prompting. With ``train_lm: false`` only the
head learns (the reader stays frozen, gradients still flow through it to the mask); with ``true`` the reader is
fine-tuned too and saved next to the head.

accelerate gives mixed precision (bf16), gradient accumulation, multi-GPU (``accelerate launch``) and
``save_state``/``load_state`` checkpoints (``output_dir/checkpoint-<step>``) for resuming. The head folder and
``output_dir`` carry ``training_ids.json`` (``artifacts.training_ids``): ``icr2 compare`` keeps those questions out.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from icr2_components.rankers.head_inputs import HeadInput, encode_for_head, final_hidden_states
from icr2_components.rankers.retrieval_head import HEAD_FOLDER, HeadConfig, RetrievalHead
from icr2_components.records.integrity import atomic_write_bytes
from icr2_components.training import activation_checkpointing
from icr2_components.training.gumbel_topk import gumbel_topk, temperature
from icr2_components.training.model_loading import effective_max_length, load_trainable
from icr2_components.training.recipe import TrainingRecipe
from icr2_components.training.resume import checkpoint_to_resume, record_recipe
from icr2_components.training.trained_ids import copy_training_ids, record_training_ids


@dataclass
class JointExample:
    id: str
    head_input: HeadInput
    full_ids: torch.Tensor  # (1, T + target)
    labels: torch.Tensor  # (1, T + target)
    gold: torch.Tensor  # (passages,) bool


def joint_examples(examples, tokenizer, query_aware: bool = False) -> list[JointExample]:
    """DA-encoded examples -> head inputs (passage and query spans) plus the generation target.

    With ``query_aware`` the prompt also names the question before the corpus (Lost in the Middle 4.2), so that the
    passages' hidden states, which the head pools, can attend to it; the generation term then reads that prompt
    followed by the example's own target tokens, so the reader answers the prompt the head scored.
    """
    out = []
    for example in examples:
        head_input = encode_for_head(tokenizer, example.task_type, example.query, example.documents, query_aware)
        prompt = head_input.input_ids[0].tolist()
        target_ids, target_labels = example.input_ids[example.prompt_length:], example.labels[example.prompt_length:]
        if not query_aware and prompt != example.input_ids[: example.prompt_length]:
            raise RuntimeError(f"{example.id}: the head's prompt tokens differ from the training prompt tokens.")
        gold = torch.tensor([pid in set(example.gold_passage_ids) for pid in head_input.passage_ids])
        out.append(JointExample(example.id, head_input, torch.tensor([prompt + list(target_ids)]),
                                torch.tensor([[-100] * len(prompt) + list(target_labels)]), gold))
    return out


def retrieval_loss(scores: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """``-mean over gold passages of log softmax(scores)``."""
    if not bool(gold.any()):
        raise ValueError("An example without a gold passage cannot train the retrieval head.")
    return -torch.log_softmax(scores.float(), dim=-1)[gold.to(scores.device)].mean()


def passage_gate(mask: torch.Tensor, spans, length: int) -> torch.Tensor:
    """Per-token multipliers (length,): 1 outside passages, the passage's mask value inside (differentiably)."""
    indicator = torch.zeros(len(spans), length, device=mask.device, dtype=mask.dtype)
    for i, (start, end) in enumerate(spans):
        indicator[i, start:end] = 1.0
    return 1.0 + (mask - 1.0) @ indicator


def generation_loss(model, example: JointExample, mask: torch.Tensor) -> torch.Tensor:
    ids = example.full_ids.to(model.device)
    embeds = model.get_input_embeddings()(ids)
    gate = passage_gate(mask.to(embeds.dtype), example.head_input.passage_spans, ids.shape[1])
    return model(
        inputs_embeds=embeds * gate[None, :, None], labels=example.labels.to(model.device), use_cache=False
    ).loss


def head_step_losses(model, head, example: JointExample, recipe: TrainingRecipe, tau: float) -> dict[str, torch.Tensor]:
    """The losses of one example (see the module docstring); ``total`` is what is back-propagated."""
    options = recipe.retrieval_head
    with torch.set_grad_enabled(options.train_lm and torch.is_grad_enabled()):
        hidden = final_hidden_states(model, example.head_input.input_ids)
    scores = head(hidden, example.head_input.passage_spans, example.head_input.query_span)
    losses = {"retrieval": retrieval_loss(scores, example.gold)}
    total = options.retrieval_weight * losses["retrieval"] if options.loss in ("joint", "retrieval") else 0.0
    if options.loss in ("joint", "generation"):
        mask = gumbel_topk(scores.float(), options.top_k, tau, hard=True, noise=head.training)
        losses["generation"] = generation_loss(model, example, mask)
        total = total + options.generation_weight * losses["generation"]
    losses["total"] = total
    return losses


def head_recall(model, head, examples: list[JointExample], k: int, per_example: bool = False) -> dict[str, Any]:
    """Mean share of gold passages in the head's top K, and mean L_ret, without gradients (with ``per_example``,
    each example's recall too, for an interval over examples)."""
    recalls, losses = [], []
    head.eval()
    with torch.no_grad():
        for example in examples:
            hidden = final_hidden_states(model, example.head_input.input_ids)
            scores = head(hidden, example.head_input.passage_spans, example.head_input.query_span).cpu()
            top = set(torch.topk(scores, min(k, len(scores))).indices.tolist())
            gold = example.gold.nonzero().flatten().tolist()
            recalls.append(sum(1 for g in gold if g in top) / len(gold))
            losses.append(float(retrieval_loss(scores, example.gold)))
    means = {"recall_at_k": sum(recalls) / len(recalls), "retrieval_loss": sum(losses) / len(losses)}
    return {**means, "recall_at_k_per_example": recalls} if per_example else means


BEST_HEAD_FILE = "best_head.pt"


def save_progress(checkpoint: Path, step: int, history: list[dict], best: float, bad_evals: int,
                  best_state: dict | None) -> None:
    """What a resumed run needs beyond accelerate's state: the loss curve so far and the early-stopping state (the
    best head by validation L_ret). ``step.json`` last, written whole or not at all: it marks the checkpoint
    complete, so a kill while it is written must not leave an empty one behind."""
    if best_state is not None:
        torch.save(best_state, checkpoint / BEST_HEAD_FILE)
    progress = json.dumps({"step": step, "history": history, "best": best, "bad_evals": bad_evals}).encode()
    atomic_write_bytes(checkpoint / "step.json", lambda stream: stream.write(progress))


def load_progress(checkpoint: Path) -> tuple[int, list[dict], float, int, dict | None]:
    saved = json.loads((checkpoint / "step.json").read_text())
    best_file = checkpoint / BEST_HEAD_FILE
    best_state = torch.load(best_file, weights_only=True) if best_file.exists() else None
    # checkpoints written before the curve was kept hold the step alone
    return (saved["step"], saved.get("history", []), saved.get("best", float("inf")), saved.get("bad_evals", 0),
            best_state)


def save_head(head, model, tokenizer, recipe: TrainingRecipe) -> Path:
    from icr2_components.models.introspection import model_signature

    out = Path(recipe.output_dir)
    if recipe.retrieval_head.train_lm:
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        head.config.model = str(out.resolve())
    else:
        head.config.model = recipe.model
    head.config.model_signature = model_signature(model)
    return head.save(out / HEAD_FOLDER)


def train_retrieval_head(recipe: TrainingRecipe, progress: bool = True) -> dict[str, Any]:
    """Train the head (and optionally the reader) as the recipe says; save and return a summary.

    Usage:
        >>> summary = train_retrieval_head(load_recipe("training/smollm2_cpu_retrieval_head.yaml"))
        >>> RetrievalHeadRanker(head=summary["head"])
    """
    from accelerate import Accelerator
    from tqdm.auto import tqdm

    from icr2_components.training.sft import load_split

    t, options = recipe.training, recipe.retrieval_head
    start_time = time.perf_counter()
    accelerator = Accelerator(gradient_accumulation_steps=t.gradient_accumulation_steps,
                              mixed_precision="bf16" if t.bf16 else "no", cpu=t.device == "cpu")
    # Training needs its own trainable copy, not the shared inference one in MODEL_CACHE (model_loading.py).
    model, tokenizer = load_trainable(recipe.model, t.dtype, t.attn_implementation, t.rope_theta)
    if t.gradient_checkpointing:
        activation_checkpointing.enable_on(model)
    model.requires_grad_(options.train_lm)
    max_length = effective_max_length(model.config, recipe.max_seq_length)
    loaded, validation, skips = load_split(recipe, tokenizer, max_length, "da")
    train = joint_examples(loaded.examples, tokenizer, options.query_aware)
    held = joint_examples(validation, tokenizer, options.query_aware)
    ids_file = record_training_ids(recipe, train, held)  # before training: checkpoints are covered
    config = HeadConfig(hidden_size=int(model.config.hidden_size), proj_dim=options.proj_dim, top_k=options.top_k,
                        query_aware=options.query_aware)
    torch.manual_seed(t.seed)
    head = RetrievalHead(config.hidden_size, config.proj_dim, config)
    groups = [{"params": head.parameters(), "lr": options.head_learning_rate}]
    if options.train_lm:
        groups.append({"params": [p for p in model.parameters() if p.requires_grad], "lr": t.learning_rate})
    optimizer = torch.optim.AdamW(groups, weight_decay=t.weight_decay)
    if options.train_lm:
        model, head, optimizer = accelerator.prepare(model, head, optimizer)
    else:
        # A frozen reader is not prepared, so that save_state does not write its weights into every checkpoint
        # (538 MB each for SmolLM2-135M); its forward passes run under accelerator.autocast() below instead.
        model = model.to(accelerator.device)
        head, optimizer = accelerator.prepare(head, optimizer)
    step, resumed_at = 0, None
    history: list[dict[str, float]] = []
    best, best_state, bad_evals = float("inf"), None, 0
    # step.json is written last: a folder a kill left half-written is passed over
    checkpoint = checkpoint_to_resume(recipe, lambda path: (path / "step.json").is_file())
    if accelerator.is_main_process:
        record_recipe(recipe)  # what a resumed run must match
    if checkpoint is not None:
        accelerator.load_state(str(checkpoint))
        step, history, best, bad_evals, best_state = load_progress(checkpoint)
        resumed_at = step
    total_steps = t.max_steps
    model.train(options.train_lm)
    bar = tqdm(total=total_steps, initial=step, desc="joint retrieval-head training", disable=not progress)
    while step < total_steps:
        example = train[step % len(train)]
        head.train()
        tau = temperature(step, total_steps, options.tau_start, options.tau_end, options.tau_schedule)
        with accelerator.accumulate(head), accelerator.autocast():
            losses = head_step_losses(model, head, example, recipe, tau)
            accelerator.backward(losses["total"])
            optimizer.step()
            optimizer.zero_grad()
        step += 1
        bar.update(1)
        history.append({"step": step, "tau": tau, **{k: float(v.detach()) for k, v in losses.items()}})
        if held and t.eval_steps and step % t.eval_steps == 0:
            with accelerator.autocast():
                metrics = head_recall(model, head, held, options.top_k)
            history[-1].update({f"eval_{k}": v for k, v in metrics.items()})
            if metrics["retrieval_loss"] < best:
                best, bad_evals = metrics["retrieval_loss"], 0
                best_state = {k: v.detach().clone() for k, v in accelerator.unwrap_model(head).state_dict().items()}
            else:
                bad_evals += 1
        if t.save_steps and step % t.save_steps == 0:  # after the evaluation: a resumed run continues from both
            checkpoint = Path(recipe.output_dir) / f"checkpoint-{step}"
            accelerator.save_state(str(checkpoint))
            save_progress(checkpoint, step, history, best, bad_evals, best_state)
        if t.early_stopping_patience and bad_evals >= t.early_stopping_patience:
            break
    bar.close()
    head = accelerator.unwrap_model(head)
    model = accelerator.unwrap_model(model) if options.train_lm else model
    if best_state is not None:
        head.load_state_dict(best_state)
    if held:
        with accelerator.autocast():  # as the validations during training ran
            validation = head_recall(model, head, held, options.top_k, per_example=True)
    saved = save_head(head, model, tokenizer, recipe)
    copy_training_ids(recipe, saved)
    summary = {
        "method": "retrieval_head",
        "model": recipe.model,
        "head": str(saved),
        "steps": step,
        "resumed_at_step": resumed_at,
        "training_ids": str(ids_file),
        "train_examples": len(train),
        "validation_examples": len(held),
        "skips": skips,
        "dropped_distractor_passages": loaded.dropped_passages,
        "history": history,
        "validation": validation if held else None,
        "seconds": time.perf_counter() - start_time,
        "recipe": recipe.as_dict(),
    }
    (Path(recipe.output_dir) / "training_summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary
