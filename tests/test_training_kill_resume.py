"""Kill-and-resume is exact: an ``icr2 train`` run killed with SIGKILL after a checkpoint and resumed
(``training.resume_from_checkpoint: true``) ends with the same weights and the same loss curve as a run that was
never stopped. Plumbing test on ``tiny-random-mistral`` (random weights, 13M parameters, so checkpoints are small
and the run is quick): what is checked is Trainer's state across a kill (optimizer, scheduler, RNG, data order
within and across epochs), not what the model learns. 6 real NQ-sample records, 3 optimizer steps an epoch
(batch 1, accumulation 2), 5 steps, a checkpoint every 2: the kill lands after checkpoint-2, mid-epoch, and the
resumed run crosses into the second epoch. A checkpoint left half-written by the kill (no trainer_state.json,
which Trainer writes last) is not resumed from. The uninterrupted run goes alongside the one that is killed (they
share nothing), which halves the wall time on a loaded machine; the CPU work is a few seconds a run.

The same kill for the shipped CPU LoRA recipe (``training/smollm2_cpu_rta_lora.yaml``: SFT-RTA, LoRA r 8 on the
attention projections), its model swapped for ``tiny-random-mistral`` and resumed by simply running the same command
again (the default ``training.resume_from_checkpoint: auto``): the same adapter as a run never stopped; and for the
retrieval head's own trainer. ``auto``'s choice of checkpoint is checked without training at the end."""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
STEPS, SAVE_EVERY = 5, 2
LIMIT_S = 1200  # per run; each needs ~15 s of CPU, the rest is waiting for a loaded machine


def _command(recipe: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "icr2_components.cli", "train", "--config", str(recipe), "--no-progress", *extra]


def _environment() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HAYSTACK_TELEMETRY_ENABLED="False",
                OMP_NUM_THREADS="1")


def _curve(folder: Path) -> list[tuple[int, float]]:
    history = json.loads((folder / "training_summary.json").read_text())["log_history"]
    return [(h["step"], h["loss"]) for h in history if "loss" in h]


def _start_whole_and_kill_after(recipe: Path, whole_dir: Path, checkpoint: Path,
                                is_complete: Callable[[Path], bool]) -> tuple[subprocess.Popen, object]:
    """Start the uninterrupted run (output ``whole_dir``) and the one to kill (the recipe's ``output_dir``) side
    by side; SIGKILL the second as soon as ``checkpoint`` is whole by ``is_complete`` (not merely begun). Returns
    the uninterrupted run and its stderr log (``whole_dir`` + ``.log``: a file, not a pipe nobody reads while it
    runs)."""
    whole_log = whole_dir.with_suffix(".log").open("w")
    whole = subprocess.Popen(_command(recipe, "--set", f"output_dir={whole_dir}"), cwd=ROOT, env=_environment(),
                             stdout=subprocess.DEVNULL, stderr=whole_log)
    process = subprocess.Popen(_command(recipe), cwd=ROOT, env=_environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + LIMIT_S
    while not is_complete(checkpoint) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    _, errors = process.communicate()
    assert is_complete(checkpoint), errors[-3000:]
    assert process.returncode == -signal.SIGKILL  # it was killed, not finished
    return whole, whole_log


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    from icr2_components.training.sample_data import build_sample_benchmark

    root = tmp_path_factory.mktemp("kill-resume")
    assert build_sample_benchmark(root / "train.jsonl", limit=7, budget_passages=2)["written"] == 6
    values = {"method": "rta", "model": "tiny-random-mistral", "output_dir": str(root / "killed"),
              "data": {"train": str(root / "train.jsonl")}, "max_seq_length": 512,
              "training": {"max_steps": STEPS, "per_device_train_batch_size": 1, "gradient_accumulation_steps": 2,
                           "learning_rate": 1e-3, "lr_scheduler_type": "linear", "warmup_ratio": 0.25,
                           "device": "cpu", "logging_steps": 1, "save_steps": SAVE_EVERY, "save_total_limit": 2}}
    path = root / "recipe.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_a_run_killed_after_a_checkpoint_resumes_to_the_uninterrupted_weights_and_curve_plumbing(recipe):
    import torch
    from safetensors.torch import load_file

    root = recipe.parent
    killed = root / "killed"
    from icr2_components.training.sft import trainer_checkpoint_is_complete

    whole, whole_log = _start_whole_and_kill_after(recipe, root / "whole", killed / f"checkpoint-{SAVE_EVERY}",
                                                   trainer_checkpoint_is_complete)
    assert not (killed / "model.safetensors").exists() and not (killed / "training_summary.json").exists()
    saved = sorted(int(p.name.split("-")[1]) for p in killed.glob("checkpoint-*"))
    assert saved and max(saved) < STEPS
    # what a kill during a save leaves: a newer checkpoint folder without trainer_state.json
    (killed / f"checkpoint-{STEPS - 1}").mkdir()
    (killed / f"checkpoint-{STEPS - 1}" / "model.safetensors").write_bytes(b"partial")

    resumed = subprocess.run(_command(recipe, "--set", "training.resume_from_checkpoint=true"), cwd=ROOT,
                             env=_environment(), capture_output=True, text=True, timeout=LIMIT_S)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((killed / "training_summary.json").read_text())
    assert summary["resumed_at_step"] in saved and summary["resumed_at_step"] % SAVE_EVERY == 0
    assert summary["global_steps"] == STEPS

    whole.wait(timeout=LIMIT_S)
    whole_log.close()
    assert whole.returncode == 0, (root / "whole.log").read_text()[-3000:]

    curve_resumed, curve_whole = _curve(killed), _curve(root / "whole")
    assert [s for s, _ in curve_whole] == list(range(1, STEPS + 1))
    assert curve_resumed == curve_whole  # every step's loss, bitwise
    assert curve_whole[-1][1] < curve_whole[0][1]  # the loss moved
    a, b = load_file(str(killed / "model.safetensors")), load_file(str(root / "whole" / "model.safetensors"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), max(float((a[k] - b[k]).abs().max()) for k in a)


JOINT_STEPS, JOINT_SAVE_EVERY = 6, 2


def test_a_joint_retrieval_head_run_killed_after_a_checkpoint_resumes_to_the_same_head_and_curve_plumbing(
        tmp_path):
    """The retrieval head's own trainer (accelerate, ``training/joint.py``): killed after a checkpoint and resumed,
    it ends with the uninterrupted run's head, bitwise, its whole loss curve (the steps before the kill included)
    and the same best-by-validation choice; a checkpoint left without ``step.json`` is not resumed from."""
    import torch
    from safetensors.torch import load_file

    from icr2_components.training.sample_data import build_sample_benchmark

    assert build_sample_benchmark(tmp_path / "train.jsonl", limit=7, budget_passages=2)["written"] == 6
    values = {"method": "retrieval_head", "model": "tiny-random-mistral", "output_dir": str(tmp_path / "killed"),
              "data": {"train": str(tmp_path / "train.jsonl"), "validation_fraction": 0.34}, "max_seq_length": 512,
              "training": {"max_steps": JOINT_STEPS, "gradient_accumulation_steps": 1, "device": "cpu",
                           "eval_steps": JOINT_SAVE_EVERY, "save_steps": JOINT_SAVE_EVERY},
              "retrieval_head": {"top_k": 1, "proj_dim": 16, "head_learning_rate": 1e-2, "loss": "joint"}}
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(values))
    killed = tmp_path / "killed"
    # step.json is written last, and atomically: its presence marks a whole checkpoint
    whole, whole_log = _start_whole_and_kill_after(recipe, tmp_path / "whole",
                                                   killed / f"checkpoint-{JOINT_SAVE_EVERY}",
                                                   lambda path: (path / "step.json").is_file())
    assert not (killed / "training_summary.json").exists()
    saved = sorted(int(p.name.split("-")[1]) for p in killed.glob("checkpoint-*") if (p / "step.json").exists())
    assert saved and max(saved) < JOINT_STEPS
    # the frozen reader (13 MB of weights here, 538 MB for SmolLM2) is not written into every checkpoint
    checkpoint_bytes = sum(f.stat().st_size for f in (killed / f"checkpoint-{saved[0]}").iterdir())
    assert checkpoint_bytes < 2_000_000, sorted(f.name for f in (killed / f"checkpoint-{saved[0]}").iterdir())
    (killed / f"checkpoint-{JOINT_STEPS - 1}").mkdir()  # what a kill during a save leaves: no step.json

    resumed = subprocess.run(_command(recipe, "--set", "training.resume_from_checkpoint=true"), cwd=ROOT,
                             env=_environment(), capture_output=True, text=True, timeout=LIMIT_S)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    whole.wait(timeout=LIMIT_S)
    whole_log.close()
    assert whole.returncode == 0, (tmp_path / "whole.log").read_text()[-3000:]

    a = json.loads((killed / "training_summary.json").read_text())
    b = json.loads((tmp_path / "whole" / "training_summary.json").read_text())
    assert a["resumed_at_step"] in saved and b["resumed_at_step"] is None
    assert [h["step"] for h in b["history"]] == list(range(1, JOINT_STEPS + 1))
    assert a["history"] == b["history"]  # every step's losses and tau, the validation points included, bitwise
    assert sum("eval_retrieval_loss" in h for h in b["history"]) == JOINT_STEPS // JOINT_SAVE_EVERY
    assert a["validation"] == b["validation"]
    head_a = load_file(str(killed / "retrieval_head" / "model.safetensors"))
    head_b = load_file(str(tmp_path / "whole" / "retrieval_head" / "model.safetensors"))
    assert head_a.keys() == head_b.keys() and all(torch.equal(head_a[k], head_b[k]) for k in head_a)


LORA_STEPS, LORA_SAVE_EVERY = 4, 2


def test_a_lora_run_of_the_shipped_cpu_recipe_killed_and_run_again_ends_with_the_uninterrupted_adapter_plumbing(
        recipe):
    """The shipped CPU LoRA recipe on the module's 6 records, 4 steps, a checkpoint every 2, the adapter kept
    unmerged so that it is what is compared; killed once ``checkpoint-2`` is whole, then the same command again."""
    import torch
    from safetensors.torch import load_file

    from icr2_components.training.sft import trainer_checkpoint_is_complete

    root = recipe.parent
    values = yaml.safe_load((ROOT / "training" / "smollm2_cpu_rta_lora.yaml").read_text())
    assert "resume_from_checkpoint" not in (values.get("training") or {})  # the default is what is tested
    values.update(model="tiny-random-mistral", output_dir=str(root / "lora-killed"),
                  data={"train": str(root / "train.jsonl")}, max_seq_length=512)
    values["lora"]["merge"] = False
    values["training"].update(max_steps=LORA_STEPS, save_steps=LORA_SAVE_EVERY, logging_steps=1)
    lora_recipe = root / "lora-recipe.yaml"
    lora_recipe.write_text(yaml.safe_dump(values))
    killed = root / "lora-killed"

    whole, whole_log = _start_whole_and_kill_after(lora_recipe, root / "lora-whole",
                                                   killed / f"checkpoint-{LORA_SAVE_EVERY}",
                                                   trainer_checkpoint_is_complete)
    assert not (killed / "adapter").exists() and not (killed / "training_summary.json").exists()
    (killed / f"checkpoint-{LORA_STEPS - 1}").mkdir()  # what a kill during a save leaves: no trainer_state.json

    again = subprocess.run(_command(lora_recipe), cwd=ROOT, env=_environment(), capture_output=True, text=True,
                           timeout=LIMIT_S)  # the same command: nothing says "resume"
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads((killed / "training_summary.json").read_text())
    assert summary["resumed_at_step"] == LORA_SAVE_EVERY and summary["global_steps"] == LORA_STEPS

    whole.wait(timeout=LIMIT_S)
    whole_log.close()
    assert whole.returncode == 0, (root / "lora-whole.log").read_text()[-3000:]
    assert json.loads((root / "lora-whole" / "training_summary.json").read_text())["resumed_from"] is None

    a = load_file(str(killed / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(root / "lora-whole" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and len(a) > 0
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-6) for k in a), worst
    # the adapter moved from its initialisation (LoRA's B matrices start at zero)
    assert any(float(b[k].abs().max()) > 0 for k in b if "lora_B" in k)


@pytest.mark.unit
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


@pytest.mark.unit
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
