"""A LoRA adapter folder (what ``icr2 train`` writes with ``lora.merge: false``) as a plain model folder.

An adapter is a few MB where a fine-tuned SmolLM2 is 540 MB, so adapters are what a run keeps (and what the
repository can hold); but every component loads a plain folder (``from_pretrained``, attention taps, the RAP
filter). :func:`merged_adapter_folder` merges the adapter into its base model once, into the cache directory
keyed by the adapter files' hash, and returns that folder: ``resolve_model(adapter_dir)`` does this, so
``LocalChatReader(model="bench/results/icr2_table3/adapters/sft_da")`` works like any model path.

The adapter's ``adapter_config.json`` names its base (``base_model_name_or_path``: an alias, path or hub id,
resolved by ``resolve_model``). The adapter's tokenizer is the base's plus the tokens the fine-tuning added (the
retrieval markers of SFT-RTA/CCI), which the folder lists in ``tokenizer_added_tokens.json`` (no file: none
added), so the folder holds no copy of the base's 3.5 MB ``tokenizer.json`` (``save_adapter_tokenizer``,
``adapter_tokenizer``; a folder that does hold a ``tokenizer.json``, as adapters saved earlier did, is read as it
is). The base's embeddings are resized to that tokenizer before the adapter (whose trainable token rows carry the
markers' trained values) is applied.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"
#: the tokens an adapter's fine-tuning added to its base's tokenizer (HF ``added_tokens`` entries, with their ids)
ADDED_TOKENS_FILE = "tokenizer_added_tokens.json"
_ADDED_TOKEN_FIELDS = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")
#: the files that hold an adapter's weights (peft writes one of them)
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def is_adapter_folder(path: str | os.PathLike) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file() and not (Path(path) / "config.json").is_file()


def adapter_digest(path: str | os.PathLike) -> str:
    """sha256 over the adapter folder's files (names and bytes), so a retrained adapter merges anew."""
    digest = hashlib.sha256()
    for file in sorted(p for p in Path(path).iterdir() if p.is_file()):
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def save_adapter_tokenizer(tokenizer, folder: str | os.PathLike, base_tokenizer) -> list[dict]:
    """Write what an adapter folder keeps of its fine-tuned ``tokenizer``: the tokens it has that
    ``base_tokenizer`` lacks, with their ids, in ``ADDED_TOKENS_FILE`` (nothing when it adds none); returns them."""
    base_vocab = base_tokenizer.get_vocab()
    added = [{"id": token_id, **{name: getattr(token, name) for name in _ADDED_TOKEN_FIELDS}}
             for token_id, token in sorted(tokenizer.added_tokens_decoder.items()) if token.content not in base_vocab]
    if added:
        (Path(folder) / ADDED_TOKENS_FILE).write_text(json.dumps(added, indent=1) + "\n")
    return added


def adapter_tokenizer(path: str | os.PathLike, base_folder: str):
    """The tokenizer of the adapter at ``path``: the folder's own ``tokenizer.json`` when it holds one, else the
    base's (``base_folder``) with the tokens of ``ADDED_TOKENS_FILE`` added at their recorded ids.

    :raises ValueError: an added token lands on another id than recorded (the base is not the adapter's).
    """
    from transformers import AddedToken, AutoTokenizer

    path = Path(path)
    if (path / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(base_folder)
    listed = path / ADDED_TOKENS_FILE
    for entry in json.loads(listed.read_text()) if listed.is_file() else []:
        if entry["content"] not in tokenizer.get_vocab():
            tokenizer.add_tokens([AddedToken(**{name: entry[name] for name in _ADDED_TOKEN_FIELDS})],
                                 special_tokens=entry["special"])
        found = tokenizer.convert_tokens_to_ids(entry["content"])
        if found != entry["id"]:
            raise ValueError(f"{listed}: token {entry['content']!r} is id {entry['id']} for the adapter but {found} "
                             f"on the base tokenizer of {base_folder}; the adapter was trained on another base model.")
    return tokenizer


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
    if not any((path / name).is_file() for name in ADAPTER_WEIGHTS):
        # a folder kept for its record (config, training summary) whose weights were cheap to retrain
        raise ValueError(f"{path} holds no adapter weights ({ADAPTER_WEIGHTS[0]}): only its config and training "
                         "record were kept. Train it again from its recipe (training_summary.json names it), e.g. "
                         "icr2 reproduce icr2-fine-tuning --train --conditions ARM.")
    target = cache_dir() / "merged_adapters" / f"{path.resolve().name}-{adapter_digest(path)[:16]}"
    with file_lock(target.with_suffix(".lock")):
        if (target / "config.json").is_file():
            return str(target)
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(resolve(base), dtype=torch.float32)
        tokenizer = adapter_tokenizer(path, resolve(base))
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
