"""Sentence-embedding backends for passages at scale: fp32 PyTorch, ONNX Runtime (fp32 and int8) and OpenVINO.

``fp32`` is plain ``SentenceTransformer.encode``. The other backends run the same model exported once, locally,
from the sentence-transformers folder (no hub), into the project's cache directory
(``<cache_dir>/models/onnx/<model>-<hash>/``):

- ``model_plain.onnx``: the transformer exported with ``torch.onnx.export`` (dynamic batch and sequence axes);
- ``model.onnx``: the same graph with ONNX Runtime's BERT fusions (attention, LayerNorm, GELU), what
  ``backend: onnx`` runs;
- ``model_qint8.onnx``: ``model.onnx`` dynamically quantised to int8 weights (``onnxruntime.quantization.
  quantize_dynamic``, the method sentence-transformers' ``export_dynamic_quantized_onnx_model`` wraps), what
  ``backend: onnx-int8`` runs;
- ``backend: openvino`` compiles ``model_plain.onnx`` with the OpenVINO runtime.

int8 is dynamic quantisation: activation scales are computed per batch, so a passage's int8 vector moves slightly
with the batch it lands in (within the int8 tolerance; fp32 ONNX and OpenVINO do not). Only ``core.compile_model``
of the OpenVINO runtime is used, not its model-conversion tool (the only part of it with telemetry).

Tokenisation (the model's own fast tokenizer, its ``max_seq_length``), pooling (mean or CLS, read from the
model's Pooling module) and normalisation are done here exactly as sentence-transformers does them, so the
vectors agree with ``SentenceTransformer.encode`` (cosine >= 0.99 for fp32 ONNX; tests/test_embedding_scale.py).

Why not ``SentenceTransformer(path, backend="onnx")``: sentence-transformers 6.2 runs it through
``optimum-onnx`` / ``optimum-intel``, whose releases pin ``transformers<4.58`` / ``<5.6`` and would downgrade the
project's transformers; ``onnxruntime``, ``onnx`` and ``openvino`` alone (the ``embed`` extra) need nothing else.

Usage:
    >>> from icr2_components.models.sentence_backends import sentence_encoder
    >>> encoder = sentence_encoder("all-minilm-l6-v2", backend="onnx-int8", threads=2)
    >>> vectors = encoder.encode(["Marie Curie\\nShe won two Nobel prizes."], batch_size=64)   # (1, 384) float32

ONNX Runtime: https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html ;
sentence-transformers' efficiency guide: https://sbert.net/docs/sentence_transformer/usage/efficiency.html
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from icr2_components.errors import UserInputError
from icr2_components.models.file_lock import file_lock
from icr2_components.models.resolver import resolve_model
from icr2_components.paths import cache_dir

BACKENDS = ("fp32", "onnx", "onnx-int8", "openvino")
EXPORT_VERSION = 2
_DEVICE_PATTERN = re.compile(r"^(cpu|cuda(:\d+)?|mps|npu(:\d+)?|gpu(\.\d+)?)$")


class EmbeddingBackendError(UserInputError):
    """An embedding backend cannot run here (a missing package, an unknown device); the message says what to do."""


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise EmbeddingBackendError(f"embedding backend must be one of {', '.join(BACKENDS)}, got {backend!r}.")
    return backend


def check_device(device: str) -> str:
    if not isinstance(device, str) or not _DEVICE_PATTERN.match(device):
        raise EmbeddingBackendError(f"device must be cpu, cuda, cuda:N, mps, npu:N or gpu (OpenVINO), got {device!r}.")
    return device


class SentenceEncoder(Protocol):
    backend: str

    @property
    def dimension(self) -> int: ...

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray: ...

    def close(self) -> None: ...


# -- export ------------------------------------------------------------------------------------------------------


def _model_key(path: str) -> str:
    """Names the export folder: changes when the model's weights or config change."""
    folder = Path(path)
    parts = [str(folder.resolve()), str(EXPORT_VERSION)]
    for name in ("config.json", "modules.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json"):
        file = folder / name
        if file.exists():
            stat = file.stat()
            parts.append(f"{name}:{stat.st_size}:{int(stat.st_mtime)}")
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]


def export_dir(model: str = "all-minilm-l6-v2") -> Path:
    """Where the ONNX export of ``model`` lives (or will live) in the cache directory."""
    path = resolve_model(model, check_available=True)
    if not Path(path).is_dir():
        raise EmbeddingBackendError(
            f"the ONNX export needs a local sentence-transformers folder; {model!r} resolved to {path!r}."
        )
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(path).name if Path(path).name != "model" else model)
    return cache_dir() / "models" / "onnx" / f"{name}-{_model_key(path)}"


def _pooling_mode(st_model) -> str:
    from sentence_transformers.sentence_transformer.modules import Pooling

    for module in st_model:
        if isinstance(module, Pooling):
            mode = module.pooling_mode if isinstance(module.pooling_mode, str) else "+".join(module.pooling_mode)
            if not getattr(module, "include_prompt", True):
                raise EmbeddingBackendError(
                    "the ONNX backends do not support pooling without the prompt tokens: use backend fp32."
                )
            if mode not in ("mean", "cls"):
                raise EmbeddingBackendError(
                    f"the ONNX backends support mean or CLS pooling; this model pools with {mode!r}: use backend fp32."
                )
            return mode
    raise EmbeddingBackendError(
        "the model has no Pooling module; the ONNX backends need a standard Transformer + Pooling model: use backend "
        "fp32."
    )


def _export(model: str, target: Path) -> None:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize

    path = resolve_model(model, check_available=True)
    st_model = SentenceTransformer(path, device="cpu")
    transformer = st_model[0]
    auto_model = transformer.auto_model.eval()
    tokenizer = transformer.tokenizer
    pooling = _pooling_mode(st_model)
    normalize = any(isinstance(module, Normalize) for module in st_model)
    sample = tokenizer(["an example passage for the export", "a second one"], padding=True, return_tensors="pt")
    input_names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in sample]

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = auto_model

        def forward(self, *inputs):
            return self.model(**dict(zip(input_names, inputs, strict=True)), return_dict=True).last_hidden_state

    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".export-"))
    try:
        axes = {name: {0: "batch", 1: "sequence"} for name in input_names}
        axes["last_hidden_state"] = {0: "batch", 1: "sequence"}
        with torch.no_grad():
            torch.onnx.export(
                Wrapped(), tuple(sample[name] for name in input_names), str(tmp / "model_plain.onnx"),
                input_names=input_names, output_names=["last_hidden_state"], dynamic_axes=axes,
                opset_version=17, do_constant_folding=True, dynamo=False,
            )
        config = auto_model.config
        fused = _fuse(tmp / "model_plain.onnx", tmp / "model.onnx", config)
        _quantize(tmp / "model.onnx", tmp / "model_qint8.onnx")
        tokenizer.save_pretrained(tmp)
        meta = {
            "version": EXPORT_VERSION,
            "source": str(Path(path).resolve()),
            "input_names": input_names,
            "pooling": pooling,
            "normalize": normalize,
            "max_seq_length": int(st_model.max_seq_length),
            "dimension": int(config.hidden_size),
            "fused": fused,
        }
        (tmp / "export.json").write_text(json.dumps(meta, indent=2))
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _fuse(source: Path, target: Path, config) -> bool:
    """ONNX Runtime's transformer fusions for BERT-like models; a plain copy where they do not apply."""
    if getattr(config, "model_type", "") in ("bert", "roberta", "xlm-roberta", "distilbert", "mpnet"):
        try:
            from onnxruntime.transformers.optimizer import optimize_model

            optimized = optimize_model(str(source), model_type="bert", num_heads=int(config.num_attention_heads),
                                       hidden_size=int(config.hidden_size), opt_level=1)
            optimized.save_model_to_file(str(target))
            return True
        except Exception:  # fusion is an optimisation; the plain graph gives the same vectors
            import logging

            logging.getLogger(__name__).warning(
                "ONNX Runtime's BERT fusions failed on %s; using the plain export.", source, exc_info=True
            )
    shutil.copyfile(source, target)
    return False


def _quantize(source: Path, target: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # int8 weights, activations quantised per batch at run time (dynamic): no calibration data needed. Per-channel
    # weight scales: on MiniLM per-tensor scales give a mean cosine to fp32 of 0.955 on sample passages, per-channel
    # 0.994 (min 0.990). The fused graph has com.microsoft ops shape inference cannot type: their outputs are float.
    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True, reduce_range=False,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def ensure_onnx_export(model: str = "all-minilm-l6-v2") -> Path:
    """Export ``model`` to ONNX (plain, fused, int8) once into the cache directory and return the folder.

    Usage:
        >>> # ~/.cache/icr2_components/models/onnx/all-minilm-l6-v2-<hash>
        >>> folder = ensure_onnx_export("all-minilm-l6-v2")
        >>> sorted(p.name for p in folder.glob("*.onnx"))
        ['model.onnx', 'model_plain.onnx', 'model_qint8.onnx']
    """
    _require("onnx", "onnx")
    _require("onnxruntime", "onnxruntime")
    target = export_dir(model)
    if (target / "export.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.with_suffix(".lock")):
        if not (target / "export.json").exists():
            _export(model, target)
    return target


def _require(module: str, package: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise EmbeddingBackendError(
            f"this embedding backend needs the '{package}' package: pip install 'icr2_components[embed]' "
            "(onnxruntime, onnx, openvino), or use backend fp32."
        )


# -- encoders ----------------------------------------------------------------------------------------------------


class _ExportedEncoder:
    """Tokenise, run the exported transformer, pool and normalise as sentence-transformers does."""

    backend = ""

    def __init__(self, folder: Path) -> None:
        from transformers import AutoTokenizer

        self.folder = folder
        self.meta = json.loads((folder / "export.json").read_text())
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.input_names = list(self.meta["input_names"])
        self.max_seq_length = int(self.meta["max_seq_length"])

    @property
    def dimension(self) -> int:
        return int(self.meta["dimension"])

    def _run(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        texts = list(texts)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        # longest first, as sentence-transformers does: batches of similar length pad little
        order = np.argsort([-len(text) for text in texts], kind="stable")
        for start in range(0, len(texts), batch_size):
            index = order[start : start + batch_size]
            batch = self.tokenizer(
                [texts[i] for i in index],
                padding=True,
                truncation=True,
                max_length=self.max_seq_length,
                return_tensors="np",
            )
            inputs = {name: batch[name].astype(np.int64) for name in self.input_names}
            hidden = self._run(inputs)
            mask = inputs["attention_mask"].astype(np.float32)[:, :, None]
            if self.meta["pooling"] == "mean":
                pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            else:
                pooled = hidden[:, 0]
            if self.meta["normalize"]:
                pooled = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            out[index] = pooled
        return out

    def close(self) -> None:
        pass


class OnnxRuntimeEncoder(_ExportedEncoder):
    """``backend: onnx`` (fused fp32 graph) or ``onnx-int8`` (dynamically quantised) on ONNX Runtime."""

    def __init__(
        self, folder: Path, *, quantized: bool = False, device: str = "cpu", threads: int | None = None
    ) -> None:
        import onnxruntime as ort

        super().__init__(folder)
        self.backend = "onnx-int8" if quantized else "onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            options.intra_op_num_threads = int(threads)
            options.inter_op_num_threads = 1
        providers: list[Any] = ["CPUExecutionProvider"]
        if device.startswith("cuda"):
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise EmbeddingBackendError(
                    f"device {device} with backend {self.backend} needs onnxruntime-gpu (this onnxruntime has "
                    f"{', '.join(ort.get_available_providers())}); install it in place of onnxruntime, or use backend "
                    "fp32 on CUDA."
                )
            device_id = int(device.partition(":")[2] or 0)
            providers = [("CUDAExecutionProvider", {"device_id": device_id}), "CPUExecutionProvider"]
        elif device != "cpu":
            raise EmbeddingBackendError(f"backend {self.backend} runs on cpu or cuda[:N], got device {device!r}.")
        name = "model_qint8.onnx" if quantized else "model.onnx"
        self.session = ort.InferenceSession(str(folder / name), sess_options=options, providers=providers)

    def _run(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run(["last_hidden_state"], inputs)[0]


class OpenVinoEncoder(_ExportedEncoder):
    """``backend: openvino``: the plain ONNX export compiled by the OpenVINO runtime (CPU, or an Intel GPU)."""

    backend = "openvino"

    def __init__(self, folder: Path, *, device: str = "cpu", threads: int | None = None) -> None:
        _require("openvino", "openvino")
        import openvino as ov

        super().__init__(folder)
        if device == "cpu":
            target = "CPU"
        elif device.startswith("gpu"):
            target = device.upper()
        else:
            raise EmbeddingBackendError(
                f"backend openvino runs on cpu or gpu (an Intel GPU), got device {device!r}; use onnx or fp32 on CUDA."
            )
        core = ov.Core()
        config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
        if threads and target == "CPU":
            config["INFERENCE_NUM_THREADS"] = int(threads)
        self.compiled = core.compile_model(str(folder / "model_plain.onnx"), target, config)
        self.request = self.compiled.create_infer_request()
        self._lock = threading.Lock()

    def _run(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        with self._lock:
            result = self.request.infer(inputs)
            return np.array(result[self.compiled.output(0)])


class TorchEncoder:
    """``backend: fp32``: ``SentenceTransformer.encode`` on the model (shared with the process-wide model cache)."""

    backend = "fp32"

    def __init__(self, model: str, device: str | None = None) -> None:
        from icr2_components.models.cache import MODEL_CACHE

        self.model = MODEL_CACHE.sentence_transformer(model, device=device)

    @property
    def dimension(self) -> int:
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return int(getter())

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return np.asarray(self.model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                                            show_progress_bar=False, convert_to_numpy=True), dtype=np.float32)

    def close(self) -> None:
        pass


def sentence_encoder(
    model: str = "all-minilm-l6-v2", *, backend: str = "fp32", device: str | None = None, threads: int | None = None
) -> SentenceEncoder:
    """One in-process encoder for ``backend`` on ``device`` (None: cuda when there is one, else cpu; exports
    the ONNX model on first use). ``threads``: intra-op threads for ONNX Runtime / OpenVINO (None: their default)."""
    check_backend(backend)
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1 or None, got {threads}.")
    if backend == "fp32":
        return TorchEncoder(model, device=device)
    device = check_device(device or "cpu")
    folder = ensure_onnx_export(model)
    if backend == "openvino":
        return OpenVinoEncoder(folder, device=device, threads=threads)
    return OnnxRuntimeEncoder(folder, quantized=backend == "onnx-int8", device=device, threads=threads)


# -- several processes -------------------------------------------------------------------------------------------

_WORKER_ENCODER: SentenceEncoder | None = None


def _worker_init(model: str, backend: str, device: str, threads: int | None) -> None:
    global _WORKER_ENCODER
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    if threads:
        try:
            import torch

            torch.set_num_threads(threads)
        except ImportError:  # pragma: no cover - torch comes with sentence-transformers
            pass
    _WORKER_ENCODER = sentence_encoder(model, backend=backend, device=device, threads=threads)


def _worker_encode(texts: list[str], batch_size: int) -> np.ndarray:
    assert _WORKER_ENCODER is not None, "worker not initialised"
    return _WORKER_ENCODER.encode(texts, batch_size)


class ProcessPoolEncoder:
    """Encode with one process per entry of ``devices`` (e.g. ``["cpu", "cpu"]`` or ``["cuda:0", "cuda:1"]``).

    ``fp32`` uses sentence-transformers' own multi-process pool (``start_multi_process_pool``, one model copy
    per device, what it recommends for several GPUs); the exported backends use a ``spawn`` process pool, each
    process holding its own ONNX Runtime / OpenVINO session. Order is kept. ``close()`` stops the processes.
    """

    def __init__(self, model: str, *, backend: str, devices: list[str], threads_per_process: int | None = 1) -> None:
        check_backend(backend)
        if not devices:
            raise ValueError("devices must name at least one device, e.g. ['cpu', 'cpu'] or ['cuda:0', 'cuda:1'].")
        self.devices = [check_device(d) for d in devices]
        self.backend = backend
        self.model_name = model
        self._dimension: int | None = None
        if backend == "fp32":
            from sentence_transformers import SentenceTransformer

            # a model of its own: starting the pool moves the model to the CPU in place
            self._st = SentenceTransformer(resolve_model(model, check_available=True), device="cpu")
            self._dimension = int(
                (getattr(self._st, "get_embedding_dimension", None) or self._st.get_sentence_embedding_dimension)()
            )
            self._pool = self._st.start_multi_process_pool(target_devices=self.devices)
            self._executor = None
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            folder = ensure_onnx_export(model)  # once, here, not in every worker
            self._dimension = int(json.loads((folder / "export.json").read_text())["dimension"])
            self._st = None
            self._pool = None
            if len(set(self.devices)) != 1:
                raise EmbeddingBackendError(
                    f"backend {backend} runs all its processes on one device; got {self.devices}."
                )
            self._executor = ProcessPoolExecutor(
                max_workers=len(self.devices), mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_init, initargs=(model, backend, self.devices[0], threads_per_process),
            )

    @property
    def dimension(self) -> int:
        assert self._dimension is not None
        return self._dimension

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if self._pool is not None:
            vectors = self._st.encode(texts, pool=self._pool, batch_size=batch_size, normalize_embeddings=True,
                                      show_progress_bar=False, convert_to_numpy=True)
            return np.asarray(vectors, dtype=np.float32)
        workers = len(self.devices)
        size = max(batch_size, -(-len(texts) // workers))
        chunks = [texts[i : i + size] for i in range(0, len(texts), size)]
        return np.concatenate(list(self._executor.map(_worker_encode, chunks, [batch_size] * len(chunks))), axis=0)

    def close(self) -> None:
        if self._pool is not None:
            self._st.stop_multi_process_pool(self._pool)
            self._pool = None
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> ProcessPoolEncoder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
