"""Where the package keeps what it makes: converted models, the sample corpus, index manifests, checkpoints."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The directory where converted bundled models live (``ICR2_CACHE_DIR`` overrides it)."""
    root = os.environ.get("ICR2_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "icr2_components")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path
