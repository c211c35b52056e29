"""Supervised fine-tuning (DA, RTA, CCI) on transformers' Trainer, full weights or LoRA (peft).

Trainer brings what a GPU user expects and we do not rewrite: bf16, gradient checkpointing, gradient
accumulation, checkpoints every ``save_steps`` and resuming from them, evaluation and early stopping, and
multi-GPU through ``accelerate launch --config_file training/accelerate_*.yaml`` (DeepSpeed ZeRO or FSDP).

The result is a plain model folder at ``output_dir`` (LoRA adapters are merged unless ``lora.merge: false``)
with the tokenizer that knows the retrieval markers, so ``LocalChatReader(model=output_dir)`` and the RAP
filter load it by path. ``output_dir/training_summary.json`` records the losses, the skipped records and the
recipe; ``training_ids.json`` (in ``output_dir`` and in a LoRA adapter folder) the ids trained and validated on,
which ``icr2 compare`` keeps out of its evaluation.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from icr2_components.models.adapters import save_adapter_tokenizer
from icr2_components.training import activation_checkpointing
from icr2_components.training.dataset import LoadedExamples, load_sft_examples
from icr2_components.training.examples import EncodedExample, pad_batch
from icr2_components.training.model_loading import effective_max_length, load_trainable
from icr2_components.training.recipe import TrainingRecipe
from icr2_components.training.resume import checkpoint_to_resume, record_recipe
from icr2_components.training.special_tokens import add_retrieval_tokens
from icr2_components.training.trained_ids import copy_training_ids, is_main_process, record_training_ids

logger = logging.getLogger(__name__)


@dataclass
class TrainingOutcome:
    output_dir: str
    summary: dict[str, Any]


def split_validation(examples: list[EncodedExample], fraction: float, seed: int = 0) -> tuple[list, list]:
    """Hold out ``fraction`` of the examples (at least one when fraction > 0) with a seeded shuffle."""
    if fraction <= 0:
        return list(examples), []
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    count = max(1, round(len(shuffled) * fraction))
    if count >= len(shuffled):
        raise ValueError(f"validation_fraction={fraction} leaves no training example out of {len(shuffled)}.")
    return shuffled[count:], shuffled[:count]


def prepare_data_files(recipe: TrainingRecipe) -> tuple[str, str | None]:
    """The train (and validation) file; builds train from the NQ sample into ``output_dir/data`` if asked."""
    data = recipe.data
    if data.train:
        return data.train, data.validation
    from icr2_components.training.sample_data import build_sample_benchmark

    build = data.build_sample
    path = Path(recipe.output_dir) / "data" / "train.jsonl"
    if not path.exists():
        # under `accelerate launch` every process builds: each writes its own file and moves it into place whole
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        build_sample_benchmark(partial, limit=build.limit, budget_passages=build.budget_passages, offset=build.offset,
                               retrievers=build.retrievers, seed=build.seed)
        os.replace(partial, path)
    return str(path), data.validation


def load_split(recipe: TrainingRecipe, tokenizer, max_length: int, method: str) -> tuple[LoadedExamples, list, dict]:
    train_file, validation_file = prepare_data_files(recipe)
    loaded = load_sft_examples(train_file, tokenizer, method, max_length, recipe.truncation, recipe.data.limit)
    skips = {"train": loaded.skips.as_dict()}
    train, validation = split_validation(loaded.examples, recipe.data.validation_fraction, recipe.training.seed)
    if validation_file:
        held = load_sft_examples(validation_file, tokenizer, method, max_length, recipe.truncation)
        validation = held.examples
        skips["validation"] = held.skips.as_dict()
    loaded.examples = train
    return loaded, validation, skips


def mean_target_loss(model, examples: Sequence[EncodedExample], pad_token_id: int) -> float:
    """Mean cross-entropy over the target tokens of ``examples`` (one example at a time, no gradients)."""
    import torch

    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for example in examples:
            batch = pad_batch([example.as_features()], pad_token_id)
            batch = {k: v.to(model.device) for k, v in batch.items()}
            targets = sum(1 for label in example.labels[1:] if label != -100)
            total += float(model(**batch).loss) * targets
            count += targets
    return total / max(count, 1)


def wrap_lora(model, recipe: TrainingRecipe, new_token_ids: list[int]):
    """LoRA adapters on ``lora.target_modules``; the new marker tokens' embedding rows train too."""
    from peft import LoraConfig, get_peft_model

    options = recipe.lora
    kwargs: dict[str, Any] = {}
    if options.train_new_token_embeddings and new_token_ids:
        kwargs["trainable_token_indices"] = {"embed_tokens": list(new_token_ids)}
    config = LoraConfig(r=options.r, lora_alpha=options.alpha, lora_dropout=options.dropout,
                        target_modules=list(options.target_modules), task_type="CAUSAL_LM", **kwargs)
    return get_peft_model(model, config)


def embedding_matrices(model) -> list:
    """The input embedding weight, plus the output layer's when it is not tied to it (SmolLM2 ties them)."""
    matrices = [model.get_input_embeddings().weight]
    output = model.get_output_embeddings()
    if output is not None and output.weight is not matrices[0]:
        matrices.append(output.weight)
    return matrices


def new_token_parameter_groups(model, new_token_ids: Sequence[int], rate: float) -> list[dict[str, Any]]:
    """Optimizer groups for ``new_token_learning_rate``: the layers at the base rate, the embedding matrices at
    ``rate`` with a gradient mask that keeps only the new tokens' rows (old rows frozen, no weight decay, so
    Adam's update for them stays exactly zero)."""
    import torch

    matrices = embedding_matrices(model)
    for weight in matrices:
        mask = torch.zeros(weight.shape[0], 1, dtype=weight.dtype, device=weight.device)
        mask[list(new_token_ids)] = 1
        weight.register_hook(lambda grad, mask=mask: grad * mask)
    ids = {id(w) for w in matrices}
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in ids]
    return [{"params": rest}, {"params": matrices, "lr": rate, "weight_decay": 0.0}]


def lora_token_parameter_groups(model, rate: float) -> list[dict[str, Any]]:
    """With LoRA, peft trains the marker rows as their own parameters (``trainable_tokens_*``, only those rows):
    they get ``rate``, the adapters the base rate."""
    tokens = [p for n, p in model.named_parameters() if p.requires_grad and "trainable_tokens" in n]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and "trainable_tokens" not in n]
    if not tokens:
        raise ValueError("new_token_learning_rate with LoRA needs lora.train_new_token_embeddings: true.")
    return [{"params": rest}, {"params": tokens, "lr": rate, "weight_decay": 0.0}]


def make_trainer(recipe: TrainingRecipe, new_token_ids: Sequence[int], **kwargs):
    """transformers' Trainer, with the recipe's own optimizer groups (``training.new_token_learning_rate``) and
    loss (``training.target_logits_only``: the vocabulary projection only where a target token is predicted)."""
    from transformers import Trainer

    rate = recipe.training.new_token_learning_rate if new_token_ids else None
    target_logits = recipe.training.target_logits_only

    class RecipeTrainer(Trainer):
        def create_optimizer(self, model=None):
            if self.optimizer is None and rate:
                opt_model = self.model if model is None else model
                optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, opt_model)
                groups = (lora_token_parameter_groups(opt_model, rate) if recipe.finetuning == "lora"
                          else new_token_parameter_groups(opt_model, new_token_ids, rate))
                self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
            return super().create_optimizer(model) if self.optimizer is None else self.optimizer

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if not target_logits:
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            from icr2_components.training.target_logits import target_only_loss

            result = target_only_loss(model, inputs, num_items_in_batch, return_outputs)
            # As Trainer.compute_loss does: num_items_in_batch counts the targets of every process, and DDP averages
            # the gradients, so each process's sum over that count is scaled back by the process count (without it
            # two processes trained at half the loss; tests/test_training_multiprocess.py)
            if self.args.average_tokens_across_devices and num_items_in_batch is not None \
                    and self.accelerator.num_processes > 1:
                scale = self.accelerator.num_processes
                result = (result[0] * scale, result[1]) if return_outputs else result * scale
            return result

    return RecipeTrainer(**kwargs)


def trainer_checkpoint_is_complete(checkpoint: Path) -> bool:
    """Whether a Trainer checkpoint was written whole: Trainer writes ``trainer_state.json`` last, and a SIGKILL
    while it writes that file leaves it empty or cut short, so the file must also parse and name its step."""
    try:
        return isinstance(json.loads((checkpoint / "trainer_state.json").read_text())["global_step"], int)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def resolve_checkpoint(recipe: TrainingRecipe) -> Path | None:
    """The checkpoint the run resumes from, by ``training.resume_from_checkpoint`` (``auto``: the newest complete
    one of the same recipe, if any; see :mod:`icr2_components.training.resume`); None for a fresh run."""
    return checkpoint_to_resume(recipe, trainer_checkpoint_is_complete)


def checkpoint_step(checkpoint: Path) -> int:
    """The global step a Trainer checkpoint was written at."""
    return int(json.loads((checkpoint / "trainer_state.json").read_text())["global_step"])


def training_arguments(recipe: TrainingRecipe, has_validation: bool):
    from transformers import TrainingArguments

    t = recipe.training
    evaluate = has_validation and (t.eval_steps or t.early_stopping_patience)
    eval_steps = t.eval_steps or max(1, t.max_steps // 10)
    save_steps = t.save_steps or (eval_steps if evaluate else None)
    kwargs: dict[str, Any] = activation_checkpointing.training_arguments_for(t.gradient_checkpointing)
    return TrainingArguments(
        output_dir=recipe.output_dir,
        learning_rate=t.learning_rate,
        max_steps=t.max_steps,
        num_train_epochs=t.num_train_epochs,
        per_device_train_batch_size=t.per_device_train_batch_size,
        per_device_eval_batch_size=1,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        bf16=t.bf16,
        warmup_steps=t.warmup_ratio,  # transformers 5: a float in [0, 1) is a ratio of the total steps
        weight_decay=t.weight_decay,
        lr_scheduler_type=t.lr_scheduler_type,
        logging_steps=t.logging_steps,
        eval_strategy="steps" if evaluate else "no",
        eval_steps=eval_steps if evaluate else None,
        save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500,
        save_total_limit=t.save_total_limit,
        load_best_model_at_end=bool(evaluate and t.early_stopping_patience),
        metric_for_best_model="eval_loss",
        greater_is_better=False,
        seed=t.seed,
        train_sampling_strategy="group_by_length" if t.group_by_length else "random",
        torch_compile=t.torch_compile,
        use_cpu=t.device == "cpu",
        report_to=t.report_to,
        dataloader_pin_memory=False,
        remove_unused_columns=False,
        **kwargs,
    )


def base_tokenizer(model: str):
    """The tokenizer of the recipe's base model as it ships (before the markers are added)."""
    from transformers import AutoTokenizer

    from icr2_components.models.resolver import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(model))


def save_result(model, tokenizer, recipe: TrainingRecipe) -> str:
    """Write a plain model folder at ``output_dir`` (merged LoRA) or, with ``merge: false``, the adapter."""
    out = Path(recipe.output_dir)
    if recipe.finetuning == "lora":
        if recipe.lora.merge:
            model = model.merge_and_unload()
        else:
            # the marker rows are saved as peft trainable tokens; the resized embedding matrix itself (28M parameters,
            # saved by default after a resize) is rebuilt by models/adapters.py when the adapter is merged
            model.save_pretrained(out / "adapter", save_embedding_layers=False)
            # the tokenizer is the base's plus the markers: only the markers are written (no tokenizer.json copy)
            save_adapter_tokenizer(tokenizer, out / "adapter", base_tokenizer(recipe.model))
            name_base_model(out / "adapter", recipe.model)
            return str(out / "adapter")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def name_base_model(adapter_dir: Path, model: str) -> None:
    """Write the recipe's model name (an alias, not this machine's resolved cache path) as the adapter's base, so
    that ``resolve_model(adapter_dir)`` merges it on any machine (models/adapters.py)."""
    config_path = adapter_dir / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = model
    config_path.write_text(json.dumps(config, indent=2))


def train_sft(recipe: TrainingRecipe, progress: bool = True) -> TrainingOutcome:
    """Fine-tune ``recipe.model`` on the recipe's data with target ``recipe.method`` (da, rta or cci).

    Usage:
        >>> outcome = train_sft(load_recipe("training/smollm2_cpu_rta.yaml"))
        >>> LocalChatReader(model=outcome.output_dir)
    """
    from transformers import EarlyStoppingCallback

    t = recipe.training
    start = time.perf_counter()
    checkpoint = resolve_checkpoint(recipe)  # before the model loads: a wrong resume setting fails at once
    if t.threads:
        import torch

        torch.set_num_threads(t.threads)
    from transformers import set_seed

    # Seeded before loading: resizing for the retrieval markers draws their rows at random (mean_resizing), and
    # Trainer seeds only when it is built, so two runs of one recipe started with different new-token rows.
    set_seed(t.seed)
    # Training needs its own trainable copy, not the shared inference one in MODEL_CACHE (model_loading.py).
    model, tokenizer = load_trainable(recipe.model, t.dtype, t.attn_implementation, t.rope_theta)
    new_ids = add_retrieval_tokens(tokenizer, model) if recipe.method != "da" else []
    max_length = effective_max_length(model.config, recipe.max_seq_length)
    loaded, validation, skips = load_split(recipe, tokenizer, max_length, recipe.method)
    ids_file = record_training_ids(recipe, loaded.examples, validation)  # before training: checkpoints are covered
    if is_main_process():
        record_recipe(recipe)  # what a resumed run must match
    if recipe.finetuning == "lora":
        model = wrap_lora(model, recipe, new_ids)
    if t.device:
        model.to(t.device)
    initial = mean_target_loss(model, loaded.examples[: min(4, len(loaded.examples))], tokenizer.pad_token_id)
    callbacks = [EarlyStoppingCallback(t.early_stopping_patience)] if t.early_stopping_patience and validation else []
    args = training_arguments(recipe, bool(validation))
    if not progress:
        args.disable_tqdm = True
    trainer = make_trainer(
        recipe,
        new_ids,
        model=model,
        args=args,
        train_dataset=loaded.features(),
        eval_dataset=[e.as_features() for e in validation] or None,
        data_collator=lambda features: pad_batch(features, tokenizer.pad_token_id),
        callbacks=callbacks,
    )
    # read before training: save_total_limit may rotate the resumed checkpoint away during the run
    resumed_at = checkpoint_step(checkpoint) if checkpoint else 0
    result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    final = mean_target_loss(trainer.model, loaded.examples[: min(4, len(loaded.examples))], tokenizer.pad_token_id)
    # one process writes the folder (DDP: every process holds the same weights)
    main_process = trainer.is_world_process_zero()
    saved = save_result(trainer.model, tokenizer, recipe) if main_process else str(Path(recipe.output_dir))
    copy_training_ids(recipe, saved)
    summary = {
        "method": recipe.method, "model": recipe.model, "finetuning": recipe.finetuning, "saved": saved,
        "train_examples": len(loaded.examples), "validation_examples": len(validation),
        "dropped_distractor_passages": loaded.dropped_passages, "skips": skips, "max_seq_length": max_length,
        "global_steps": int(result.global_step), "train_loss": float(result.training_loss),
        "first_examples_loss_before": initial, "first_examples_loss_after": final,
        "best_checkpoint": trainer.state.best_model_checkpoint, "log_history": trainer.state.log_history,
        "resumed_from": str(checkpoint) if checkpoint else None,
        "resumed_at_step": resumed_at, "training_ids": str(ids_file),
        "seconds": time.perf_counter() - start, "recipe": recipe.as_dict(),
    }
    if main_process:
        Path(recipe.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(recipe.output_dir) / "training_summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return TrainingOutcome(saved, summary)
