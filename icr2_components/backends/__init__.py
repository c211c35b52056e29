"""Where a pipeline's language model runs: backend files (``backends/*.yaml``) and the registry of backend kinds.

Every module of this package other than ``kind`` and ``pipelines`` defines one registered :class:`BackendKind`
and is imported here, so adding a kind to the package is adding one file (``local.py``, ``served.py``). A kind
defined elsewhere registers itself the same way once its module is imported.
"""

import importlib
import pkgutil

from icr2_components.backends.kind import Backend, BackendError, BackendKind, register_backend_kind
from icr2_components.backends.pipelines import load_backend

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("kind", "pipelines"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "Backend",
    "BackendError",
    "BackendKind",
    "load_backend",
    "register_backend_kind",
]
