#!/usr/bin/env bash
# GPU smoke run without downloaded weights: SFT-RTA, RAP head probing of the fine-tuned reader and the jointly
# trained retrieval head, all in bf16, on tiny-random-mistral (the GPU recipes' architecture, random weights).
#   bash scripts/smoke_tiny_mistral.sh cuda runs/smoke     # on a GPU: a few minutes; record OUT/smoke_report.json
#   bash scripts/smoke_tiny_mistral.sh cpu  /tmp/smoke     # the same recipe on CPU (tests/test_smoke_tiny_mistral.py)
# Further arguments (--set KEY=VALUE ...) are passed to both training stages, e.g. the test's shorter contexts:
#   ... cpu /tmp/smoke --set data.build_sample.budget_passages=2   # (CPU bf16 matmuls are slow: ~10x fp32's)
set -euo pipefail
DEVICE="${1:?usage: smoke_tiny_mistral.sh cpu|cuda OUT [--set KEY=VALUE ...]}"
OUT="${2:?usage: smoke_tiny_mistral.sh cpu|cuda OUT [--set KEY=VALUE ...]}"
shift 2
EXTRA=("$@")
cd "$(dirname "$0")/.."
ICR2="${ICR2:-.venv/bin/icr2}"
mkdir -p "$OUT"
stage() {  # stage NAME COMMAND...: run it, keep its seconds
  local name="$1"; shift
  local start="$EPOCHREALTIME"
  "$@" 2>&1 | tee "$OUT/$name.log" | grep -E "needs:|memory per process|error" || true
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "smoke: stage $name failed (see $OUT/$name.log)" >&2; exit 1; }
  awk -v n="$name" -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN {printf "%s %.1f\n", n, b - a}' >> "$OUT/seconds.txt"
}
: > "$OUT/seconds.txt"
stage sft "$ICR2" train --config training/smoke_tiny_mistral_rta.yaml --no-progress \
  --set training.device="$DEVICE" --set output_dir="$OUT/rta" "${EXTRA[@]}"
stage rap "$ICR2" probe-heads --benchmark "$OUT/rta/data/train.jsonl" --model "$OUT/rta" --limit 8 --q 4 \
  --dtype bfloat16 --device "$DEVICE" --output "$OUT/rap_heads.json"
stage head "$ICR2" train --config training/smoke_tiny_mistral_retrieval_head.yaml --no-progress \
  --set training.device="$DEVICE" --set output_dir="$OUT/head" "${EXTRA[@]}"
PYTHONPATH="${PYTHONPATH:-.}" "$(dirname "$ICR2")/python" - "$OUT" "$DEVICE" <<'PY'
import json, platform, sys
from pathlib import Path
import torch
out, device = Path(sys.argv[1]), sys.argv[2]
seconds = dict(line.split() for line in (out / "seconds.txt").read_text().splitlines())
sft = json.loads((out / "rta" / "training_summary.json").read_text())
head = json.loads((out / "head" / "training_summary.json").read_text())
rap = json.loads((out / "rap_heads.json").read_text())
report = {
    "device": device, "device_name": torch.cuda.get_device_name(0) if device.startswith("cuda") else platform.processor(),
    "torch": torch.__version__, "seconds": {k: float(v) for k, v in seconds.items()},
    "sft": {k: sft[k] for k in ("global_steps", "train_loss", "first_examples_loss_before", "first_examples_loss_after")},
    "rap": {"heads": rap["heads"], "instances": rap["instances"]},
    "retrieval_head": {"steps": head["steps"], "validation": head["validation"],
                       "first_total": head["history"][0]["total"], "last_total": head["history"][-1]["total"]},
}
(out / "smoke_report.json").write_text(json.dumps(report, indent=1))
print(json.dumps(report, indent=1))
PY
