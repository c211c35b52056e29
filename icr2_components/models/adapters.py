"""A LoRA adapter folder (what ``icr2 train`` writes with ``lora.merge: false``) as a plain model folder.

An adapter is a few MB where a fine-tuned SmolLM2 is 540 MB, so adapters are what a run keeps (and what the
repository can hold); but every component loads a plain folder (``from_pretrained``, attention taps, the RAP
filter). :func:`merged_adapter_folder` merges the adapter into its base model once, into the cache directory
keyed by the adapter files' hash, and returns that folder: ``resolve_model(adapter_dir)`` does this, so
``LocalChatReader(model="bench/results/icr2_table3/adapters/sft_da")`` works like any model path.

The adapter's ``adapter_config.json`` names its base (``base_model_name_or_path``: an alias, path or hub id,
resolved by ``resolve_model``); the adapter folder's tokenizer is the fine-tuned one (the retrieval markers of
SFT-RTA/CCI), and the base's embeddings are resized to it before the adapter (whose trainable token rows carry
the markers' trained values) is applied.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"


def is_adapter_folder(path: str | os.PathLike) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file() and not (Path(path) / "config.json").is_file()


def adapter_digest(path: str | os.PathLike) -> str:
    """sha256 over the adapter folder's files (names and bytes), so a retrained adapter merges anew."""
    digest = hashlib.sha256()
    for file in sorted(p for p in Path(path).iterdir() if p.is_file()):
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def merged_adapter_folder(path: str | os.PathLike, resolve) -> str:
    """The merged model folder of the adapter at ``path`` (built once into the cache).

    :param resolve: ``resolve_model``, to turn the adapter's base model name into a folder.
    :raises ValueError: when the adapter config names no base model.
    """
    from icr2_components.models.file_lock import file_lock
    from icr2_components.paths import cache_dir

    path = Path(path)
    config = json.loads((path / ADAPTER_CONFIG).read_text())
    base = config.get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{path / ADAPTER_CONFIG} names no base_model_name_or_path; the adapter cannot be merged.")
    target = cache_dir() / "merged_adapters" / f"{path.resolve().name}-{adapter_digest(path)[:16]}"
    with file_lock(target.with_suffix(".lock")):
        if (target / "config.json").is_file():
            return str(target)
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(resolve(base), dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path)
        if len(tokenizer) != model.get_input_embeddings().weight.shape[0]:
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        merged = PeftModel.from_pretrained(model, path).merge_and_unload()
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".merging-"))
        try:
            merged.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            (staging / "merged_from.json").write_text(json.dumps({"adapter": str(path.resolve()), "base": base}))
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return str(target)
