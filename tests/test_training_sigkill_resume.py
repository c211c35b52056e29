"""A training run killed with SIGKILL between checkpoints, then simply run again with the same command (the default
``training.resume_from_checkpoint: auto``), ends with the same LoRA adapter as a run that was never stopped.

The shipped CPU recipe (``training/smollm2_cpu_rta_lora.yaml``: SmolLM2-135M-Instruct, SFT-RTA, LoRA r 8 on the
attention projections) on 8 real NQ-sample records, made small: 4 optimizer steps (batch 1, accumulation 2), a
checkpoint every 2, 512 tokens, the adapter kept unmerged so that it is what is compared. The run is killed once
``checkpoint-2`` is whole; the re-run goes on from it. The uninterrupted run goes alongside the killed one.

Also: ``auto`` refuses checkpoints written by another recipe, naming what differs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
STEPS, SAVE_EVERY = 4, 2
LIMIT_S = 1800


def _command(recipe: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "icr2_components.cli", "train", "--config", str(recipe), "--no-progress", *extra]


def _environment() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HAYSTACK_TELEMETRY_ENABLED="False",
                OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    from icr2_components.training.sample_data import build_sample_benchmark

    root = tmp_path_factory.mktemp("sigkill-resume")
    # the distractors from a BM25-only index of the sample (built in seconds; the training is what is tested)
    index = {"name": "sigkill-bm25", "store": {"type": "in_memory", "persist_path": str(root / "bm25.json")},
             "corpus": {"path": "sample", "count_tokens_for": []}, "embedding": {"enabled": False}}
    (root / "bm25.yaml").write_text(yaml.safe_dump(index))
    assert build_sample_benchmark(root / "train.jsonl", limit=9, budget_passages=2,
                                  index_config=str(root / "bm25.yaml"))["written"] == 8
    values = yaml.safe_load((ROOT / "training" / "smollm2_cpu_rta_lora.yaml").read_text())
    assert "resume_from_checkpoint" not in (values.get("training") or {})  # the default is what is tested
    values["output_dir"] = str(root / "killed")
    values["data"] = {"train": str(root / "train.jsonl")}
    values["max_seq_length"] = 512
    values["lora"]["merge"] = False
    values["training"].update(max_steps=STEPS, save_steps=SAVE_EVERY, logging_steps=1)
    path = root / "recipe.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.mark.slow
def test_a_lora_run_killed_with_sigkill_and_run_again_ends_with_the_uninterrupted_adapter(recipe):
    import torch
    from safetensors.torch import load_file

    root = recipe.parent
    killed = root / "killed"
    whole_log = (root / "whole.log").open("w")
    whole = subprocess.Popen(_command(recipe, "--set", f"output_dir={root / 'whole'}"), cwd=ROOT, env=_environment(),
                             stdout=subprocess.DEVNULL, stderr=whole_log)
    process = subprocess.Popen(_command(recipe), cwd=ROOT, env=_environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    from icr2_components.training.sft import trainer_checkpoint_is_complete

    checkpoint = killed / f"checkpoint-{SAVE_EVERY}"
    deadline = time.monotonic() + LIMIT_S
    # killed once the checkpoint is whole (its trainer_state.json parses), not merely begun
    while not trainer_checkpoint_is_complete(checkpoint) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    _, errors = process.communicate()
    assert trainer_checkpoint_is_complete(checkpoint), errors[-3000:]
    assert process.returncode == -signal.SIGKILL
    assert not (killed / "adapter").exists() and not (killed / "training_summary.json").exists()

    again = subprocess.run(_command(recipe), cwd=ROOT, env=_environment(), capture_output=True, text=True,
                           timeout=LIMIT_S)  # the same command: nothing says "resume"
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads((killed / "training_summary.json").read_text())
    assert summary["resumed_at_step"] == SAVE_EVERY and summary["global_steps"] == STEPS

    whole.wait(timeout=LIMIT_S)
    whole_log.close()
    assert whole.returncode == 0, (root / "whole.log").read_text()[-3000:]
    assert json.loads((root / "whole" / "training_summary.json").read_text())["resumed_from"] is None

    a = load_file(str(killed / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(root / "whole" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and len(a) > 0
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-6) for k in a), worst
    # the adapter moved from its initialisation (LoRA's B matrices start at zero)
    assert any(float(b[k].abs().max()) > 0 for k in b if "lora_B" in k)


def test_auto_refuses_checkpoints_of_another_recipe_naming_what_differs(tmp_path):
    from icr2_components.training.recipe import load_recipe
    from icr2_components.training.resume import ResumeMismatchError, checkpoint_to_resume, record_recipe

    values = yaml.safe_load((ROOT / "training" / "smollm2_cpu_rta_lora.yaml").read_text())
    values["output_dir"] = str(tmp_path / "out")
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(values))
    first = load_recipe(tmp_path / "a.yaml")
    record_recipe(first)
    (tmp_path / "out" / "checkpoint-2").mkdir()
    (tmp_path / "out" / "checkpoint-2" / "trainer_state.json").write_text("{}")
    complete = lambda path: (path / "trainer_state.json").is_file()  # noqa: E731
    assert checkpoint_to_resume(first, complete) == tmp_path / "out" / "checkpoint-2"

    values["training"]["learning_rate"] = 1e-3
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(values))
    with pytest.raises(ResumeMismatchError, match=r"training\.learning_rate: checkpoints 0\.0002, recipe 0\.001"):
        checkpoint_to_resume(load_recipe(tmp_path / "b.yaml"), complete)
    # the record is sealed: an edited one is named
    record = tmp_path / "out" / "training_recipe.json"
    record.write_text(record.read_text().replace("0.0002", "0.001"))
    with pytest.raises(ResumeMismatchError, match="does not match the content hash"):
        checkpoint_to_resume(load_recipe(tmp_path / "b.yaml"), complete)


def test_auto_passes_over_a_checkpoint_whose_trainer_state_a_kill_cut_short(tmp_path):
    """A SIGKILL while Trainer writes ``trainer_state.json`` (its last file) leaves it empty or cut: that checkpoint
    is not whole, so ``auto`` resumes from the one before (CI once killed a run at exactly that moment)."""
    from icr2_components.training.recipe import load_recipe
    from icr2_components.training.resume import checkpoint_to_resume, record_recipe
    from icr2_components.training.sft import trainer_checkpoint_is_complete

    values = yaml.safe_load((ROOT / "training" / "smollm2_cpu_rta_lora.yaml").read_text())
    values["output_dir"] = str(tmp_path / "out")
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(values))
    recipe = load_recipe(tmp_path / "a.yaml")
    record_recipe(recipe)
    for step, state in [(2, '{"global_step": 2}'), (4, ""), (6, '{"global_st')]:
        (tmp_path / "out" / f"checkpoint-{step}").mkdir()
        (tmp_path / "out" / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    assert checkpoint_to_resume(recipe, trainer_checkpoint_is_complete) == tmp_path / "out" / "checkpoint-2"
