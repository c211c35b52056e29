"""Shared fixtures: the bundled sample (built from ../shared/data), the real SmolLM2 and MiniLM models.

Telemetry and the hub are switched off before anything imports Haystack or transformers, as the ``icr2`` command
does (the library itself sets nothing on import: tests of that run in a fresh interpreter without these).
"""

from icr2_components._environment import apply_environment_defaults

apply_environment_defaults()

import pytest  # noqa: E402

pytest_plugins = ["tests.es_fixtures", "tests.llama_server_fixtures"]


@pytest.fixture(scope="session")
def sample_files():
    """The bundled KILT-format sample corpus and NQ task file (written once into the cache directory)."""
    from icr2_components.kilt import build_sample

    return build_sample()


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct, shared through the model cache: ``(model, tokenizer)``."""
    from icr2_components.models import MODEL_CACHE

    return MODEL_CACHE.causal_lm("smollm2-135m-instruct", dtype="float32", device="cpu")


@pytest.fixture(scope="session")
def minilm():
    from icr2_components.models import MODEL_CACHE

    return MODEL_CACHE.sentence_transformer("all-minilm-l6-v2", device="cpu")


@pytest.fixture
def cache_after_setup(tmp_path):
    """An empty cache folder (``ICR2_CACHE_DIR``) but for the bundled SmolLM2 converted to safetensors, as
    ``scripts/setup.sh`` leaves a fresh machine's cache (linked to this machine's: the conversion is ~20 s a
    time, and what a test of a fresh cache checks is its checkpoints, sample and indexes)."""
    from icr2_components.models import resolve_model

    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    (cache / "models" / "smollm2-135m-instruct").symlink_to(resolve_model("smollm2-135m-instruct"),
                                                           target_is_directory=True)
    return cache
