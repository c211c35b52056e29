"""Where a pipeline's language model runs: backend files (``backends/*.yaml``) and the registry of backend kinds.

Every module of this package other than ``kind`` and ``pipelines`` defines one registered :class:`BackendKind`
and is imported here, so adding a kind to the package is adding one file (``local.py``, ``served.py``). A kind
defined elsewhere registers itself the same way once its module is imported.
"""

import importlib
import pkgutil

from icr2_components.backends.kind import (
    NEEDS,
    ROLES,
    Backend,
    BackendError,
    BackendKind,
    NoSettings,
    backend_kind_class,
    backend_kind_names,
    register_backend_kind,
)
from icr2_components.backends.pipelines import (
    BACKEND_ENV,
    BLACK_BOX_TYPES,
    apply_backend,
    backend_from_dict,
    backend_from_environment,
    check_model_access,
    component_class,
    is_black_box,
    load_backend,
    request_concurrency,
    resolve_backend,
    weights_reason,
)

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("kind", "pipelines"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "request_concurrency",
    "BACKEND_ENV", "BLACK_BOX_TYPES", "NEEDS", "ROLES", "Backend", "BackendError", "BackendKind", "NoSettings",
           "apply_backend", "backend_from_dict", "backend_from_environment", "backend_kind_class", "backend_kind_names",
           "check_model_access", "component_class", "is_black_box", "load_backend", "register_backend_kind",
           "resolve_backend", "weights_reason"]
