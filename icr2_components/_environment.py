"""The offline and telemetry defaults of the ``icr2`` command, the server, the benches and the tests.

Importing the library sets nothing: a user's own Hugging Face components keep their hub access and their telemetry
choices. The entry points this project runs call ``apply_environment_defaults()`` first, before Haystack is
imported (Haystack reads ``HAYSTACK_TELEMETRY_ENABLED`` when it is imported): telemetry off and the Hugging Face hub
offline, so the project's own commands never phone home and never download weights behind the user's back. A
variable the user set keeps its value (``HF_HUB_OFFLINE=0`` allows the hub).
"""

import os

DEFAULTS = {
    "HAYSTACK_TELEMETRY_ENABLED": "False",
    "RAGAS_DO_NOT_TRACK": "true",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def apply_environment_defaults() -> None:
    """Set the telemetry and offline variables unless the user already chose a value (entry points only)."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
