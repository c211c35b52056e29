"""Process environment defaults applied before any third-party import.

Telemetry is off and the Hugging Face hub is offline by default: this library never phones home and never
downloads weights behind the user's back. A user who wants the hub sets ``HF_HUB_OFFLINE=0`` explicitly.
"""

import os

_DEFAULTS = {
    "HAYSTACK_TELEMETRY_ENABLED": "False",
    "RAGAS_DO_NOT_TRACK": "true",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def apply_environment_defaults() -> None:
    """Set the telemetry and offline variables unless the user already chose a value."""
    for key, value in _DEFAULTS.items():
        os.environ.setdefault(key, value)
