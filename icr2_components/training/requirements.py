"""What a recipe needs from the machine, said before anything loads, and the refusal when the machine lacks it.

``icr2 train`` prints :func:`recipe_needs` first: the device and number of processes (GPUs under
``accelerate launch``), the parameter count (the model built on PyTorch's ``meta`` device from its config: no
weights are read), and a memory estimate per process from it:

- weights: parameters x bytes of ``training.dtype``;
- gradients and AdamW's two moments: trainable parameters x bytes of the dtype, each (all parameters for full
  fine-tuning; LoRA's ``r x (in + out)`` per adapted linear; the head only for ``retrieval_head`` with
  ``train_lm: false``). Under a sharded launch (FSDP / ZeRO-3) these three divide by the number of processes;
- activations (rough, +-50%): per token and layer ``34 x hidden`` bytes at 16 bits (Korthikanti et al. 2022,
  https://arxiv.org/abs/2205.05198), doubled at 32 bits, plus ``5 x heads x seq`` for eager attention's
  scores; with gradient checkpointing ``2 x hidden`` per token and layer plus one layer's full activations; plus
  the float32 logits and their gradient (``seq x vocab x 8`` bytes), times ``per_device_train_batch_size``.

:func:`check_machine` refuses, before the model loads, a recipe the machine cannot run: a CUDA device (named, or
implied by FlashAttention) without CUDA, more processes than visible GPUs, or an estimate above a GPU's memory
(or above the machine's RAM on CPU).

Usage:
    >>> needs = recipe_needs(load_recipe("training/mistral7b_gpu_rta.yaml"))
    >>> print(needs.describe()); check_machine(needs)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from icr2_components.errors import Icr2Error
from icr2_components.training.recipe import TrainingRecipe

GIB = 1024 ** 3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
CUDA_ATTENTION = ("flash_attention_2", "flash_attention_3")
# The GPU recipes' reader, so that its estimate is said on a machine that has not downloaded it (its published
# config.json, the fields that decide the parameter count and the activations).
KNOWN_CONFIGS = {
    "mistralai/Mistral-7B-Instruct-v0.2": {
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
        "tie_word_embeddings": False},
}
# The GPU count the sharded estimate is also given for (training/accelerate_fsdp.yaml's num_processes).
SHARDED_GPUS = 8


class MachineError(Icr2Error):
    """The machine cannot give what the recipe needs; the message says what is missing and what to change."""


@dataclass
class RecipeNeeds:
    source: str
    model: str
    device: str  # "cpu", "cuda", "cuda:N", "mps" or "auto" (CUDA if present, else CPU)
    needs_cuda: bool
    cuda_reason: str
    processes: int
    sharded: bool
    parameters: int | None
    trainable: int | None
    dtype: str
    sequence_length: int | None
    batch: int
    memory_bytes: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    sharded_bytes: float | None = None  # per GPU when sharded over SHARDED_GPUS (said for a one-process CUDA run)

    @property
    def per_process_bytes(self) -> float | None:
        return sum(self.memory_bytes.values()) if self.memory_bytes else None

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "needs_cuda": self.needs_cuda, "processes": self.processes,
                "gpus": self.processes if self.needs_cuda else 0, "sharded": self.sharded,
                "parameters": self.parameters, "trainable_parameters": self.trainable, "dtype": self.dtype,
                "sequence_length": self.sequence_length, "batch": self.batch,
                "memory_gib": {k: round(v / GIB, 2) for k, v in self.memory_bytes.items()},
                "per_process_gib": None if self.per_process_bytes is None else round(self.per_process_bytes / GIB, 2),
                "sharded_per_gpu_gib": None if self.sharded_bytes is None else round(self.sharded_bytes / GIB, 2),
                "notes": self.notes}

    def describe(self) -> str:
        gpus = f"{self.processes} GPU(s)" if self.needs_cuda else "no GPU"
        lines = [f"{self.source} needs: device {self.device} ({gpus}), {self.processes} process(es)"
                 + (" sharded" if self.sharded else "")]
        if self.parameters is None:
            lines.append(f"  model {self.model}: parameter count unknown (its config is not on this machine)")
        else:
            lines.append(f"  model {self.model}: {self.parameters / 1e6:.1f}M parameters, {self.trainable / 1e6:.2f}M "
                         f"trainable, dtype {self.dtype}, sequence {self.sequence_length}, batch {self.batch}")
            parts = ", ".join(f"{k} {v / GIB:.2f}" for k, v in self.memory_bytes.items())
            lines.append(f"  memory per process (estimate, GiB): {self.per_process_bytes / GIB:.2f} = {parts}")
            if self.sharded_bytes is not None:
                lines.append(f"  sharded over {SHARDED_GPUS} GPUs (accelerate launch --config_file "
                             f"training/accelerate_fsdp.yaml): {self.sharded_bytes / GIB:.2f} GiB per GPU")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


def launch_processes() -> int:
    """Processes of this launch (``accelerate launch`` / ``torchrun`` set WORLD_SIZE); 1 otherwise."""
    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


def launch_is_sharded() -> bool:
    """FSDP or DeepSpeed ZeRO-3 under ``accelerate launch`` (it exports these variables to each process)."""
    return os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" or \
        os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "") == "3"


def meta_model(recipe: TrainingRecipe):
    """The recipe's model built on the meta device from its config (no weights read); None without a config."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from icr2_components.models.resolver import resolve_model

    try:
        config = AutoConfig.from_pretrained(resolve_model(recipe.model))
    except (OSError, ValueError):
        known = KNOWN_CONFIGS.get(recipe.model)
        if known is None:
            return None
        config = AutoConfig.for_model(**known)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def lora_parameters(model, recipe: TrainingRecipe) -> int:
    """``r x (in + out)`` for every linear whose name ends in one of ``lora.target_modules``."""
    from torch import nn

    targets = tuple(recipe.lora.target_modules)
    return sum(recipe.lora.r * (m.in_features + m.out_features) for name, m in model.named_modules()
               if isinstance(m, nn.Linear) and name.split(".")[-1] in targets)


def activation_bytes(config, recipe: TrainingRecipe, sequence: int) -> float:
    t = recipe.training
    hidden, layers = int(config.hidden_size), int(config.num_hidden_layers)
    heads, vocab = int(config.num_attention_heads), int(config.vocab_size)
    width = 1.0 if (t.bf16 or DTYPE_BYTES[t.dtype] == 2) else 2.0  # 34 x hidden is for 16-bit activations
    per_layer = 34 * hidden * width + (5 * heads * sequence * width if t.attn_implementation == "eager" else 0)
    stored = layers * 2 * hidden * width + per_layer if t.gradient_checkpointing else layers * per_layer
    return t.per_device_train_batch_size * sequence * (stored + vocab * 8)


def recipe_needs(recipe: TrainingRecipe) -> RecipeNeeds:
    """What ``recipe`` needs (module docstring); reads the model's config only."""
    t = recipe.training
    device = t.device or "auto"
    needs_cuda = device.startswith("cuda") or t.attn_implementation in CUDA_ATTENTION
    reason = (f"training.device is {device}" if device.startswith("cuda") else
              f"training.attn_implementation {t.attn_implementation} runs on CUDA only" if needs_cuda else "")
    processes, sharded = launch_processes(), launch_is_sharded()
    needs = RecipeNeeds(recipe.source, recipe.model, device if not (needs_cuda and device == "auto") else "cuda",
                        needs_cuda, reason, processes, sharded, None, None, t.dtype, recipe.max_seq_length,
                        t.per_device_train_batch_size)
    if t.attn_implementation in CUDA_ATTENTION:
        needs.notes.append(f"attn_implementation {t.attn_implementation} needs the flash-attn package")
    model = meta_model(recipe)
    if model is None:
        return needs
    config = model.config
    sequence = recipe.max_seq_length or int(getattr(config, "max_position_embeddings", 0) or 0) or None
    needs.sequence_length = sequence
    parameters = sum(p.numel() for p in model.parameters())
    if recipe.method == "retrieval_head" and not recipe.retrieval_head.train_lm:
        proj = recipe.retrieval_head.proj_dim
        trainable = 2 * (config.hidden_size * proj + proj) + 3 * proj + 1
    elif recipe.finetuning == "lora":
        trainable = lora_parameters(model, recipe)
    else:
        trainable = parameters
    needs.parameters, needs.trainable = parameters, trainable
    size = DTYPE_BYTES[t.dtype]
    shard = processes if sharded else 1
    needs.memory_bytes = {"weights": parameters * size / shard, "gradients": trainable * size / shard,
                          "optimizer": 2 * trainable * size / shard,
                          "activations": activation_bytes(config, recipe, sequence or 0)}
    if needs_cuda and processes == 1:
        states = needs.memory_bytes["weights"] + needs.memory_bytes["gradients"] + needs.memory_bytes["optimizer"]
        needs.sharded_bytes = states / SHARDED_GPUS + needs.memory_bytes["activations"]
    if sequence and sequence > 8192 and not t.gradient_checkpointing:
        needs.notes.append(f"sequence {sequence} without gradient_checkpointing: activations dominate")
    return needs


def machine_memory() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def check_machine(needs: RecipeNeeds) -> None:
    """Raise :class:`MachineError` when this machine cannot give ``needs`` (module docstring)."""
    import torch

    if needs.needs_cuda:
        if not torch.cuda.is_available():
            raise MachineError(f"{needs.source} needs CUDA ({needs.cuda_reason}) and this machine has no CUDA "
                               "device. Run it on a GPU machine, or use a CPU recipe (training/smollm2_cpu_*.yaml, "
                               "training/smoke_tiny_mistral_*.yaml with --set training.device=cpu), or --set "
                               "training.device=cpu --set training.attn_implementation=sdpa.")
        visible = torch.cuda.device_count()
        local = int(os.environ.get("LOCAL_WORLD_SIZE", needs.processes))
        if local > visible:
            raise MachineError(
                f"{needs.source}: {local} processes on this machine need {local} GPUs; {visible} visible."
            )
        total = min(torch.cuda.get_device_properties(i).total_memory for i in range(visible))
        if needs.per_process_bytes is not None and needs.per_process_bytes > total:
            raise MachineError(
                f"{needs.source}: estimated {needs.per_process_bytes / GIB:.1f} GiB per GPU "
                f"(>{total / GIB:.1f} GiB on this GPU). Shard it (accelerate launch --config_file "
                "training/accelerate_fsdp.yaml), turn on gradient_checkpointing, lower max_seq_length or use LoRA.")
    elif needs.device == "mps" and not torch.backends.mps.is_available():
        raise MachineError(f"{needs.source}: training.device is mps and this machine has no MPS device.")
    elif needs.per_process_bytes is not None and not needs.device.startswith("cuda"):
        total = machine_memory()
        if needs.per_process_bytes * needs.processes > total:
            raise MachineError(
                f"{needs.source}: estimated {needs.per_process_bytes / GIB:.1f} GiB per process x {needs.processes} "
                f"(> {total / GIB:.1f} GiB of RAM). Lower max_seq_length or per_device_train_batch_size, turn on "
                "gradient_checkpointing or use LoRA.")
