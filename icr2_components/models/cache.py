"""The process-wide model cache: two components naming the same model share one loaded copy.

A RAP pipeline holds a filter and a generator over the same reader; both ask this cache, so the weights are
loaded once. Keys include everything that changes the loaded object (resolved path, dtype, device, attention
implementation), so a component asking for eager attention does not silently receive an sdpa model.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from icr2_components.extras import require_extra
from icr2_components.models.resolver import resolve_model
from icr2_components.preflight import check_device

_DTYPES = {"auto", "float32", "float16", "bfloat16"}


def check_dtype_device(dtype: Any, device: Any) -> None:
    """A local model's ``dtype`` and ``device``, checked when a component is built (not when the model loads)."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of auto, float32, float16, bfloat16, got {dtype!r}.")
    if device is not None and not (isinstance(device, str) and re.fullmatch(r"cpu|mps|cuda(:\d+)?", device)):
        raise ValueError(f"device must be cpu, cuda, cuda:N or mps, or None (the best available), got {device!r}.")


@dataclass(frozen=True)
class CausalLMKey:
    path: str
    dtype: str
    device: str
    attn_implementation: str | None


def default_device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


def resolve_torch_dtype(name: str, device: str):
    import torch

    if name == "auto":
        # bf16 on GPUs that support it, fp32 on CPU: the replies the project's figures were measured with. (On
        # CPUs with avx512_bf16, bf16 answers 1.64x faster at batch 1 but changes 7 of 32 greedy replies:
        # bench/reader_batching.py; name dtype: bfloat16 to take it.)
        if device.startswith("cuda") and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return getattr(torch, name)


class ModelCache:
    """Holds loaded causal LMs, tokenizers and sentence embedders, keyed by what makes them differ."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._causal_lms: dict[CausalLMKey, Any] = {}
        self._tokenizers: dict[str, Any] = {}
        self._sentence_models: dict[tuple[str, str], Any] = {}

    def tokenizer(self, model: str):
        require_extra("local", f"The tokenizer of {model!r}", ("transformers",))
        from transformers import AutoTokenizer

        path = resolve_model(model, check_available=True)
        with self._lock:
            if path not in self._tokenizers:
                tokenizer = AutoTokenizer.from_pretrained(path)
                if tokenizer.pad_token is None:
                    tokenizer.pad_token = tokenizer.eos_token
                self._tokenizers[path] = tokenizer
            return self._tokenizers[path]

    def causal_lm(
        self,
        model: str,
        *,
        dtype: str = "auto",
        device: str | None = None,
        attn_implementation: str | None = "sdpa",
    ):
        """Return ``(model, tokenizer)`` for a causal LM, loading it on first use."""
        require_extra("local", f"The in-process model {model!r}", ("torch", "transformers"))
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}.")
        device = device or default_device()
        check_device(device)  # a CUDA device on a machine without one: a line naming the devices it has
        path = resolve_model(model, check_available=True)
        torch_dtype = resolve_torch_dtype(dtype, device)
        # key on the resolved dtype: "auto" and "float32" on a CPU are the same model, loaded once
        key = CausalLMKey(path, str(torch_dtype).removeprefix("torch."), device, attn_implementation)
        with self._lock:
            if key not in self._causal_lms:
                from transformers import AutoModelForCausalLM

                kwargs: dict[str, Any] = {"dtype": torch_dtype}
                if attn_implementation:
                    kwargs["attn_implementation"] = attn_implementation
                loaded = AutoModelForCausalLM.from_pretrained(path, **kwargs)
                loaded.to(device)
                loaded.eval()
                self._causal_lms[key] = loaded
            return self._causal_lms[key], self.tokenizer(model)

    def sentence_transformer(self, model: str, *, device: str | None = None):
        require_extra("local", f"The embedding model {model!r}", ("torch", "sentence_transformers"))
        from sentence_transformers import SentenceTransformer

        device = device or default_device()
        check_device(device)  # a CUDA device on a machine without one: a line naming the devices it has
        path = resolve_model(model, check_available=True)
        with self._lock:
            if (path, device) not in self._sentence_models:
                self._sentence_models[(path, device)] = SentenceTransformer(path, device=device)
            return self._sentence_models[(path, device)]

    def clear(self) -> None:
        with self._lock:
            self._causal_lms.clear()
            self._tokenizers.clear()
            self._sentence_models.clear()

    def __len__(self) -> int:
        return len(self._causal_lms) + len(self._sentence_models)


MODEL_CACHE = ModelCache()
"""The one cache every component uses."""
