"""The multi-process training path on CPU: ``accelerate launch --config_file training/accelerate_cpu_ddp.yaml``
(two processes, DDP over gloo) trains the same recipe to the same loss curve as one process, at the same global
batch (per-device batch 1 x 2 processes x 2 accumulation steps = 1 x 1 x 4).

Plumbing test on the tiny *randomly initialised* Mistral (``tiny-random-mistral``, 13M parameters): what is
checked is the distribution (data sharding, gradient averaging, loss normalisation across processes), not what
the model learns. 8 real NQ-sample records, 4 optimizer steps (two epochs), learning rate 1e-3 so the loss moves.

Tolerance: every logged loss within 1e-4 of the one-process run (measured: 6e-6, float summation order across
processes), and the final weights' mean absolute difference below 1e-6 (measured 5.6e-8); single weights may
differ by up to ``steps x learning_rate`` (Adam normalises a near-zero gradient whose sign float order can flip;
measured max 1.1e-3 on 0.004% of the weights)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
STEPS, LEARNING_RATE = 4, 1e-3


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _environment() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HAYSTACK_TELEMETRY_ENABLED="False",
               OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    return env


def _losses(folder: Path) -> tuple[list[float], float]:
    summary = json.loads((folder / "training_summary.json").read_text())
    return [h["loss"] for h in summary["log_history"] if "loss" in h], summary["train_loss"]


@pytest.fixture(scope="module")
def recipe_file(tmp_path_factory):
    from icr2_components.training.sample_data import build_sample_benchmark

    root = tmp_path_factory.mktemp("multiprocess")
    built = build_sample_benchmark(root / "train.jsonl", limit=9, budget_passages=2)
    assert built["written"] == 8, built  # divisible by the global batch: no process pads its shard
    recipe = {"method": "rta", "model": "tiny-random-mistral", "output_dir": str(root / "one"),
              "data": {"train": str(root / "train.jsonl")}, "max_seq_length": 512,
              "training": {"max_steps": STEPS, "per_device_train_batch_size": 1, "gradient_accumulation_steps": 4,
                           "learning_rate": LEARNING_RATE, "device": "cpu", "logging_steps": 1}}
    path = root / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_two_cpu_processes_train_to_the_same_loss_as_one_plumbing_tiny_random_mistral(recipe_file):
    import torch
    from safetensors.torch import load_file

    root = recipe_file.parent
    one = subprocess.run([sys.executable, "-m", "icr2_components.cli", "train", "--config", str(recipe_file),
                          "--no-progress"], cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    accelerate = Path(sys.executable).with_name("accelerate")
    two = subprocess.run([str(accelerate), "launch", "--config_file", "training/accelerate_cpu_ddp.yaml",
                          "--main_process_port", str(_free_port()), "-m", "icr2_components.cli", "train",
                          "--config", str(recipe_file), "--no-progress", "--set", f"output_dir={root / 'two'}",
                          "--set", "training.gradient_accumulation_steps=2"],
                         cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "needs: device cpu (no GPU), 2 process(es)" in two.stdout  # said once, by the main process
    assert two.stdout.count("needs:") == 1

    single, single_mean = _losses(root / "one")
    double, double_mean = _losses(root / "two")
    assert len(single) == len(double) == STEPS
    assert single[-1] < single[0] - 0.1  # the loss moved: the comparison is not of two untrained models
    assert max(abs(a - b) for a, b in zip(single, double, strict=True)) < 1e-4, (single, double)
    assert abs(single_mean - double_mean) < 1e-4

    a, b = load_file(str(root / "one" / "model.safetensors")), load_file(str(root / "two" / "model.safetensors"))
    assert a.keys() == b.keys()
    differences = torch.cat([(a[k] - b[k]).abs().flatten() for k in a])
    assert differences.mean() < 1e-6 and differences.max() <= STEPS * LEARNING_RATE
    # both runs recorded the same training ids (written once, by the main process)
    ids = [json.loads((root / run / "training_ids.json").read_text())["train_ids"] for run in ("one", "two")]
    assert sorted(ids[0]) == sorted(ids[1]) and len(ids[0]) == 8
