"""Shared fixtures: the bundled sample (built from ../shared/data), the real SmolLM2 and MiniLM models.

Telemetry and the hub are switched off before anything imports Haystack or transformers, as the ``icr2`` command
does (the library itself sets nothing on import: tests of that run in a fresh interpreter without these).

Under pytest-xdist (the README's test command runs two workers) each worker gets its share of the cores: for torch,
for the interpreters its tests start and for a llama.cpp server they start (``OMP_NUM_THREADS``,
``ICR2_LLAMA_THREADS``, unless set), so two workers do not run four threads on two cores (a llama.cpp server with
more threads than free cores stalls at its threads' barrier: bench/llama_threads_beside_a_worker.py). The tests that
use the llama.cpp servers run on one worker, one after another, as they would without xdist (a single-slot server
answering two workers at once would stretch their timeouts); the rest is grouped by file, so a module's fixtures are
built once.

The unit tier (``-m unit``, run first): ``tests/unit_guard.py`` fails a unit test that loads model files, reaches the
Elasticsearch node or a llama.cpp server or starts an interpreter; under ``-m unit`` a file that marks no test
``unit``, and under ``-m "not unit"`` a file marked ``unit`` as a whole, is not imported at all
(``pytest_ignore_collect`` below).
"""

import itertools
import os
import re
import tempfile
from pathlib import Path

from icr2_components._environment import apply_environment_defaults

apply_environment_defaults()

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    os.environ.setdefault("OMP_NUM_THREADS", _share)
    # and a llama.cpp server a test starts (none is up): more threads than its share stall at their barrier
    os.environ.setdefault("ICR2_LLAMA_THREADS", _share)

import pytest  # noqa: E402

from tests.stop_at_run_end import FOLDER_VARIABLE, run_recorded_stops  # noqa: E402

pytest_plugins = ["tests.es_fixtures", "tests.llama_server_fixtures", "tests.unit_guard"]


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist): its workers inherit this
        os.environ[FOLDER_VARIABLE] = tempfile.mkdtemp(prefix="icr2-tests-started-")


def pytest_unconfigure(config):
    folder = os.environ.get(FOLDER_VARIABLE)
    if not hasattr(config, "workerinput") and folder and Path(folder).is_dir():
        for line in run_recorded_stops(Path(folder)):
            print(f"stopped after the run: {line}")


def _can_select(markexpr: str, unit: bool) -> bool:
    """Whether ``-m markexpr`` can select a test whose ``unit`` mark is ``unit`` (whatever its other marks)."""
    try:
        from _pytest.mark.expression import Expression

        expression = Expression.compile(markexpr)
    except Exception:  # pytest's parser moved, or a bad expression (which pytest itself then reports)
        return True
    names = sorted(set(re.findall(r"[\w.:+-]+", markexpr)) - {"and", "or", "not", "unit"})[:10]
    for bits in itertools.product((False, True), repeat=len(names)):
        chosen = {name for name, bit in zip(names, bits, strict=True) if bit} | ({"unit"} if unit else set())
        if expression.evaluate(_marked_with(chosen)):
            return True
    return False


def _marked_with(chosen: set[str]):
    """The matcher of a test marked with exactly the ``chosen`` markers, for pytest's ``Expression.evaluate``."""
    return lambda name, /, **kwargs: name in chosen


_WHOLE_FILE_UNIT = re.compile(r"^pytestmark = pytest\.mark\.unit$", re.MULTILINE)


def pytest_ignore_collect(collection_path, config):
    """A test file none of whose tests ``-m`` can select is not even imported: under ``-m unit`` a file that marks
    nothing ``unit`` (collecting the whole suite imports torch, transformers, scipy and more), under
    ``-m "not unit"`` a file marked ``unit`` as a whole."""
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    markexpr = (config.getoption("markexpr") or "").strip()
    if not markexpr:
        return None
    try:
        text = collection_path.read_text(encoding="utf-8")
    except OSError:
        return None
    if "mark.unit" not in text and not _can_select(markexpr, unit=False):
        return True
    whole_file_unit = _WHOLE_FILE_UNIT.search(text) and len(re.findall(r"^pytestmark\b", text, re.MULTILINE)) == 1
    if whole_file_unit and not _can_select(markexpr, unit=True):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    """xdist's groups (used by ``--dist loadgroup``): the llama.cpp server's tests together, the rest by file."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            group = "llama_server" if item.get_closest_marker("llama_server") else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def sample_files():
    """The bundled KILT-format sample corpus and NQ task file (written once into the cache directory)."""
    from icr2_components.kilt import build_sample

    return build_sample()


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct, shared through the model cache: ``(model, tokenizer)``."""
    from icr2_components.models.cache import MODEL_CACHE

    return MODEL_CACHE.causal_lm("smollm2-135m-instruct", dtype="float32", device="cpu")


@pytest.fixture(scope="session")
def minilm():
    from icr2_components.models.cache import MODEL_CACHE

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
