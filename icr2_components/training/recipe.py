"""Training recipes: one YAML file in ``training/`` says what to train, on what, and how.

```yaml
method: rta                     # da | rta | cci (SFT, ICR2 4.1) | retrieval_head (joint training, ICR2 4.3)
model: smollm2-135m-instruct    # alias, local path or HF id (resolved by icr2_components.models.resolve_model)
output_dir: runs/smollm2-rta    # the trained model folder (loadable by LocalChatReader(model=output_dir))
data:
  train: data/icr2-nq-train.jsonl   # ICR2-format JSONL (icr2 build-benchmark); or `build_sample` below
  validation: null                  # a second file, or validation_fraction of train held out
  validation_fraction: 0.0
  limit: null
  build_sample: {limit: 16, budget_passages: 3, offset: 0}   # build train from the bundled NQ sample
max_seq_length: null            # default and upper bound: the model's context (max_position_embeddings)
truncation: drop_distractors    # drop_distractors | skip | error (see training/examples.py)
finetuning: full                # full | lora
lora: {r: 16, alpha: 32, dropout: 0.05, target_modules: [q_proj, k_proj, v_proj, o_proj], merge: true}
training: {learning_rate: 1.0e-5, max_steps: 10000, ...}       # see TrainingOptions
retrieval_head: {top_k: 2, ...}                                  # see HeadOptions (method retrieval_head)
```

Unknown keys and unknown values are refused with the list of allowed ones.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from icr2_components.paths import output_folder_problem
from icr2_components.strict_mapping import (
    Fraction,
    NonNegativeInt,
    NonNegativeNumber,
    PathText,
    PositiveInt,
    PositiveNumber,
    at_key,
    check_fields,
    check_known_keys,
    check_type,
    dataclass_from_mapping,
    field_types,
    with_yaml_line,
)
from icr2_components.text.retrieval_replies import SFT_METHODS
from icr2_components.training.examples import TRUNCATION_POLICIES

METHODS = (*SFT_METHODS, "retrieval_head")
FINETUNING = ("full", "lora")
ATTENTION = ("sdpa", "eager", "flash_attention_2", "flash_attention_3")
DTYPES = ("float32", "bfloat16", "float16")
HEAD_LOSSES = ("joint", "generation", "retrieval")
SCHEDULES = ("exponential", "linear", "constant")


class RecipeError(ValueError):
    """A recipe that cannot be run; the message names the file, the key and what is allowed."""


# The ranges of the recipe's numbers are declared beside each field (checked by strict_mapping, in strict mode: no
# bool, NaN or infinity): a NaN learning rate would otherwise fail inside torch after training had started.
Positive = PositiveInt
NonNegative = NonNegativeInt
HeldOut = Annotated[float, Field(ge=0, lt=1)]


@dataclass
class SampleBuild:
    limit: Positive = 16
    budget_passages: Positive = 3
    offset: NonNegative = 0
    retrievers: list[str] = field(default_factory=lambda: ["bm25"])
    seed: NonNegative = 0


@dataclass
class DataOptions:
    train: PathText | None = None
    validation: PathText | None = None
    validation_fraction: HeldOut = 0.0
    limit: Positive | None = None
    build_sample: SampleBuild | None = None


@dataclass
class LoraOptions:
    r: Positive = 16
    alpha: Positive = 32
    dropout: HeldOut = 0.05
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    merge: bool = True
    train_new_token_embeddings: bool = True


@dataclass
class TrainingOptions:
    learning_rate: PositiveNumber = 1e-5
    # Full fine-tuning only. Mean-initialised marker rows need a large logit change before greedy decoding emits
    # them: at the base rate a short run learns the whole target except the markers, and a high rate on the whole
    # (tied) embedding matrix wrecks the vocabulary. Set, the marker rows train at this rate and the old vocabulary
    # rows are frozen; the transformer layers train at learning_rate. None: everything at learning_rate.
    new_token_learning_rate: PositiveNumber | None = None
    max_steps: Positive = 10000
    num_train_epochs: PositiveNumber = 2.0
    per_device_train_batch_size: Positive = 1
    gradient_accumulation_steps: Positive = 4
    dtype: str = "float32"
    bf16: bool = False
    gradient_checkpointing: bool = False
    attn_implementation: str = "sdpa"
    rope_theta: PositiveNumber | None = None
    warmup_ratio: Fraction = 0.0
    weight_decay: NonNegativeNumber = 0.0
    lr_scheduler_type: str = "constant"
    logging_steps: Positive = 1
    eval_steps: Positive | None = None
    save_steps: Positive | None = None
    save_total_limit: Positive = 2
    early_stopping_patience: Positive | None = None
    # auto: go on from the newest complete checkpoint of the same recipe in output_dir, if any (training/resume.py);
    # true: from the newest (an error when none); false: start over; a path: that checkpoint
    resume_from_checkpoint: bool | str = "auto"
    seed: NonNegative = 0
    device: str | None = None
    report_to: str = "none"
    # Throughput levers (bench/training_throughput.py measures each against plain transformers.Trainer):
    # project only the positions that predict a target token onto the vocabulary (training/target_logits.py);
    target_logits_only: bool = True
    # batch examples of similar length together (less padding at per_device_train_batch_size > 1);
    group_by_length: bool = False
    # torch threads for the run (None: torch's default, one per core);
    threads: Positive | None = None
    # torch.compile the model (inductor; compile time is paid once per new sequence length bucket).
    torch_compile: bool = False


@dataclass
class HeadOptions:
    top_k: Positive = 2
    proj_dim: Positive = 256
    head_learning_rate: PositiveNumber = 1e-3
    loss: str = "joint"
    generation_weight: NonNegativeNumber = 1.0
    retrieval_weight: NonNegativeNumber = 1.0
    tau_start: PositiveNumber = 1.0
    tau_end: PositiveNumber = 0.1
    tau_schedule: str = "exponential"
    train_lm: bool = False
    query_aware: bool = False  # the prompt names the question before the corpus too (the head's passages see it)


@dataclass
class TrainingRecipe:
    method: str
    model: str
    output_dir: PathText
    data: DataOptions
    max_seq_length: Positive | None = None
    truncation: str = "drop_distractors"
    finetuning: str = "full"
    lora: LoraOptions = field(default_factory=LoraOptions)
    training: TrainingOptions = field(default_factory=TrainingOptions)
    retrieval_head: HeadOptions = field(default_factory=HeadOptions)
    source: str = "<dict>"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _build(cls, values: Any, where: str, *path: str):
    with at_key(*path):
        return dataclass_from_mapping(cls, values, where, RecipeError)


def _choice(value: Any, allowed: tuple, where: str) -> None:
    if value not in allowed:
        raise RecipeError(f"{where} is {value!r}; choose one of {list(allowed)}.")


def _device(value: Any, where: str) -> None:
    """``training.device``: unset (CUDA when present, else CPU), cpu, cuda, cuda:N or mps; refused before the
    model loads (``training.requirements`` then checks that this machine has it)."""
    if (
        value is None
        or value in ("cpu", "cuda", "mps")
        or (isinstance(value, str) and re.fullmatch(r"cuda:\d+", value))
    ):
        return
    raise RecipeError(f"{where} is {value!r}; choose cpu, cuda, cuda:N or mps, or leave it unset (CUDA when "
                      "present, else CPU).")


def recipe_from_dict(
    values: dict[str, Any], source: str = "<dict>", base_dir: str | os.PathLike | None = None
) -> TrainingRecipe:
    """Validate a recipe mapping. Relative data paths are read from ``base_dir`` (the current directory)."""
    if not isinstance(values, dict):
        raise RecipeError(f"{source}: a recipe is a YAML mapping.")
    allowed = {f.name for f in dataclasses.fields(TrainingRecipe)} - {"source"}
    with at_key(*sorted(set(values) - allowed, key=str)[:1]):
        check_known_keys(values, allowed, source, RecipeError)
    for key in ("method", "model", "output_dir", "data"):
        if key not in values:
            raise RecipeError(f"{source}: the recipe needs `{key}`.")
    hints = field_types(TrainingRecipe)
    for key in ("method", "model", "output_dir", "max_seq_length", "truncation", "finetuning"):
        if key in values:
            with at_key(key):
                check_type(values[key], hints[key], f"{source}: key '{key}'", RecipeError)
    _choice(values["method"], METHODS, f"{source}: method")
    if values["data"] is not None and not isinstance(values["data"], dict):
        raise RecipeError(f"{source}: section data must be a mapping, got {values['data']!r}.")
    data = dict(values["data"] or {})
    sample = data.pop("build_sample", None)
    data_options = _build(DataOptions, data, f"{source}: section data", "data")
    if sample is not None:
        data_options.build_sample = _build(SampleBuild, sample, f"{source}: section data.build_sample", "data",
                                           "build_sample")
    if not data_options.train and data_options.build_sample is None:
        raise RecipeError(f"{source}: data needs `train` (an ICR2 JSONL) or `build_sample`.")
    if base_dir is not None:
        for name in ("train", "validation"):
            path = getattr(data_options, name)
            if path and not os.path.isabs(path):
                setattr(data_options, name, str(Path(base_dir) / path))
    recipe = TrainingRecipe(
        method=values["method"],
        model=values["model"],
        output_dir=values["output_dir"],
        data=data_options,
        max_seq_length=values.get("max_seq_length"),
        truncation=values.get("truncation", "drop_distractors"),
        finetuning=values.get("finetuning", "full"),
        lora=_build(LoraOptions, values.get("lora"), f"{source}: section lora", "lora"),
        training=_build(TrainingOptions, values.get("training"), f"{source}: section training", "training"),
        retrieval_head=_build(HeadOptions, values.get("retrieval_head"), f"{source}: section retrieval_head",
                              "retrieval_head"),
        source=source,
    )
    check_recipe(recipe)
    return recipe


def check_recipe(recipe: TrainingRecipe) -> None:
    """Checks a recipe, read or built in code: every field against its declaration (types and ranges), then the
    choices and the combinations; one :class:`RecipeError` line naming the file and the key."""
    s, t, h = recipe.source, recipe.training, recipe.retrieval_head
    check_fields(recipe, s, RecipeError)
    _choice(recipe.truncation, TRUNCATION_POLICIES, f"{s}: truncation")
    _choice(recipe.finetuning, FINETUNING, f"{s}: finetuning")
    _choice(t.attn_implementation, ATTENTION, f"{s}: training.attn_implementation")
    _choice(t.dtype, DTYPES, f"{s}: training.dtype")
    _device(t.device, f"{s}: training.device")
    _choice(h.loss, HEAD_LOSSES, f"{s}: retrieval_head.loss")
    _choice(h.tau_schedule, SCHEDULES, f"{s}: retrieval_head.tau_schedule")
    if t.early_stopping_patience and not (recipe.data.validation or recipe.data.validation_fraction):
        raise RecipeError(
            f"{s}: early stopping needs a validation split (data.validation or data.validation_fraction)."
        )
    if t.new_token_learning_rate and recipe.finetuning == "lora" and not recipe.lora.train_new_token_embeddings:
        raise RecipeError(f"{s}: training.new_token_learning_rate with LoRA sets the rate of the marker rows, which "
                          "train only with lora.train_new_token_embeddings: true.")
    if t.device is not None:
        _check_device(t.device, f"{s}: training.device")
    if t.bf16 and t.dtype == "float16":
        raise RecipeError(f"{s}: bf16 mixed precision with float16 weights; use dtype float32 or bfloat16.")
    # before the model loads and the data is built: an output_dir that is a file fails in a line, not at the save
    problem = output_folder_problem(recipe.output_dir)
    if problem:
        raise RecipeError(f"{s}: output_dir cannot be used: {problem}.")


_TRAINING_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?|mps)$")


def _check_device(device: str, where: str) -> None:
    """A device torch can train on here, checked before any model loads (``tpu`` failed after the model had loaded)."""
    if not _TRAINING_DEVICE.match(device):
        raise RecipeError(f"{where} is {device!r}; choose cpu, cuda, cuda:N or mps, or leave it unset (CUDA when "
                          "present, else CPU).")  # the words of _device, which the recipe checker runs first
    import torch

    # Whether this machine has the CUDA device is not the recipe's fault: a GPU recipe must load (and be checked)
    # anywhere; `icr2 train` refuses it before the model loads (training/requirements.py, check_machine).
    if device == "mps" and not torch.backends.mps.is_available():
        raise RecipeError(f"{where} is 'mps', but MPS is not available here; use cpu (or null).")


def load_recipe(path: str | os.PathLike, overrides: dict[str, Any] | None = None) -> TrainingRecipe:
    """Read and validate ``training/<recipe>.yaml``; ``overrides`` (dotted keys) replace values first.

    Usage:
        >>> recipe = load_recipe("training/smollm2_cpu_rta.yaml", {"training.max_steps": 2})
    """
    import yaml

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Recipe not found: {path}. The recipes live in training/*.yaml.")
    text = path.read_text()
    values = yaml.safe_load(text) or {}
    for dotted, value in (overrides or {}).items():
        apply_override(values, dotted, value)
    try:
        return recipe_from_dict(values, source=str(path), base_dir=Path.cwd())
    except RecipeError as error:  # the line of the key it names, when the file has that key
        located = with_yaml_line(error, text, str(path))
        if located is error:
            raise
        raise located from None


def apply_override(values: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``values["a"]["b"] = value`` for ``dotted="a.b"``, creating the mappings on the way."""
    keys = dotted.split(".")
    node = values
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[keys[-1]] = value
