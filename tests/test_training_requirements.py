"""``icr2 train`` says what a recipe needs before it starts and refuses early what this machine cannot give:
the parameter count it states is the real model's (built on the meta device, no weights read), LoRA's trainable
count is peft's, a device that does not exist is refused by the recipe checker, and a CUDA recipe on a CPU-only
machine or one above the RAM is refused before any model loads."""

import pytest
import torch

from icr2_components.cli import main
from icr2_components.training.recipe import RecipeError, load_recipe
from icr2_components.training.requirements import GIB, MachineError, check_machine, recipe_needs

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if a training run gets as far as loading a model."""
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the machine check")

    for module in ("icr2_components.training.sft", "icr2_components.training.joint"):
        monkeypatch.setattr(f"{module}.load_trainable", refuse)


def test_stated_parameter_counts_are_the_real_models(smollm2):
    model, _ = smollm2
    full = recipe_needs(load_recipe("training/smollm2_cpu_rta.yaml"))
    assert full.parameters == sum(p.numel() for p in model.parameters()) == full.trainable
    assert (
        full.memory_bytes["weights"] == full.parameters * 4
        and full.memory_bytes["optimizer"] == 2 * full.parameters * 4
    )
    assert full.sequence_length == 1024 and full.device == "cpu" and not full.needs_cuda

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from icr2_components.models import resolve_model

    recipe = load_recipe("training/smollm2_cpu_rta_lora.yaml")
    lora = recipe_needs(recipe)
    fresh = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m-instruct"))
    options = recipe.lora
    peft_model = get_peft_model(fresh, LoraConfig(r=options.r, lora_alpha=options.alpha,
                                                  target_modules=list(options.target_modules), task_type="CAUSAL_LM"))
    assert lora.trainable == sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert lora.per_process_bytes < full.per_process_bytes


@pytest.mark.unit
def test_the_gpu_recipe_states_its_needs_without_its_weights():
    """Mistral-7B is not downloaded here: its published config gives the count (7.24B) and the estimate."""
    needs = recipe_needs(load_recipe("training/mistral7b_gpu_rta.yaml"))
    assert needs.needs_cuda and needs.device == "cuda" and needs.sequence_length == 32768
    assert 7.2e9 < needs.parameters < 7.3e9
    # bf16 weights, gradients and AdamW's two moments: 8 bytes a parameter, 54 GiB, before activations
    states = needs.memory_bytes["weights"] + needs.memory_bytes["gradients"] + needs.memory_bytes["optimizer"]
    assert states == pytest.approx(needs.parameters * 8)
    assert needs.per_process_bytes > states > 50 * GIB > 30 * GIB > needs.sharded_bytes  # sharding divides the states
    assert "7241.7M parameters" in needs.describe() and "sharded over 8 GPUs" in needs.describe()


def test_an_unknown_device_is_refused_by_the_recipe_checker(no_model_load):
    with pytest.raises(RecipeError, match=r"training.device is 'tpu'; choose cpu, cuda, cuda:N or mps"):
        load_recipe("training/smollm2_cpu_rta.yaml", {"training.device": "tpu"})
    assert load_recipe("training/smollm2_cpu_rta.yaml", {"training.device": "cuda:1"}).training.device == "cuda:1"


@no_cuda
def test_a_cuda_recipe_is_refused_on_a_cpu_machine_before_the_model_loads(no_model_load, capsys, tmp_path):
    code = main(["train", "--config", "training/mistral7b_gpu_rta.yaml", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 1
    assert "needs: device cuda (1 GPU(s))" in captured.out and "memory per process (estimate, GiB)" in captured.out
    assert "needs CUDA (training.attn_implementation flash_attention_2 runs on CUDA only)" in captured.err
    code = main(["train", "--config", "training/smollm2_cpu_rta.yaml", "--set", "training.device=cuda",
                 "--set", f"output_dir={tmp_path}", "--no-progress"])
    assert code == 1 and "needs CUDA (training.device is cuda)" in capsys.readouterr().err


def test_a_recipe_above_the_machines_ram_is_refused(no_model_load):
    recipe = load_recipe("training/smollm2_cpu_rta.yaml", {"training.per_device_train_batch_size": 4096})
    needs = recipe_needs(recipe)
    with pytest.raises(MachineError, match=r"GiB of RAM\). Lower max_seq_length or per_device_train_batch_size"):
        check_machine(needs)
    check_machine(recipe_needs(load_recipe("training/smollm2_cpu_rta.yaml")))  # the recipe as committed fits
