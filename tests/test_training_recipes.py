"""Every committed recipe in training/ loads and validates through the project's recipe loader, and the key
settings each recipe's header comment states are the settings it holds (a comment cannot drift from its file)."""

import re
from pathlib import Path

import pytest
import yaml

from icr2_components.training.recipe import RecipeError, load_recipe

ROOT = Path(__file__).resolve().parents[1]
TRAINING = ROOT / "training"
RECIPES = sorted(p.name for p in TRAINING.glob("*.yaml") if not p.name.startswith("accelerate"))
ACCELERATE = sorted(p.name for p in TRAINING.glob("accelerate*.yaml"))
METHOD_NAMES = {"SFT-DA": "da", "SFT-RTA": "rta", "SFT-CCI": "cci", "retrieval head": "retrieval_head",
                "retrieval-head": "retrieval_head"}


def header(name: str) -> str:
    """The comment lines at the top of a recipe, joined."""
    lines = []
    for line in (TRAINING / name).read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return " ".join(lines)


@pytest.mark.unit
def test_the_recipe_set_is_what_the_project_ships():
    assert len(RECIPES) == 11 and len(ACCELERATE) == 3, (RECIPES, ACCELERATE)
    for name in RECIPES:
        assert header(name), f"{name} has no header comment saying what it trains"


@pytest.mark.parametrize("name", RECIPES)
def test_each_recipe_loads_and_its_header_matches_its_settings(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # relative data paths are read from the current directory
    recipe = load_recipe(f"training/{name}")
    raw = yaml.safe_load((TRAINING / name).read_text())
    text = header(name)
    assert recipe.method == raw["method"] and recipe.model == raw["model"] and recipe.output_dir == raw["output_dir"]
    named = {method for label, method in METHOD_NAMES.items() if label in text}
    assert named <= {recipe.method}, f"{name}: the header names {named}, the recipe trains {recipe.method}"
    if name.startswith("smollm2_cpu"):
        assert named, f"{name}: the header does not say which method it trains"
    for command in re.findall(r"train --config (training/\S+\.yaml)", text):
        assert command == f"training/{name}", f"{name}: its launch command trains {command}"
    if name.startswith("smollm2_cpu"):
        assert recipe.model == "smollm2-135m-instruct" and recipe.training.device == "cpu"
        assert recipe.output_dir == "runs/" + name[: -len(".yaml")].replace("_", "-")
        assert recipe.data.build_sample is not None and recipe.data.train is None  # built from the bundled sample
        questions = re.search(r"on (\d+) questions of the bundled NQ sample", text)
        if questions:
            assert recipe.data.build_sample.limit == int(questions.group(1))
        loadable = re.search(r'LocalChatReader\(model="([^"]+)"\)', text)
        if loadable:
            assert loadable.group(1) == recipe.output_dir
    if name.startswith("mistral7b_gpu"):
        assert recipe.model == "mistralai/Mistral-7B-Instruct-v0.2"
        t = recipe.training
        if "32K tokens" in text:
            assert recipe.max_seq_length == 32768
        if "batch 1 x accumulation 4" in text:
            assert (t.per_device_train_batch_size, t.gradient_accumulation_steps) == (1, 4)
        if "lr 1e-5" in text:
            assert t.learning_rate == pytest.approx(1e-5)
        if "rope base 1e6" in text:
            assert t.rope_theta == pytest.approx(1e6)
        if "up to 10,000 steps with early stopping on the validation split" in text:
            assert t.max_steps == 10000 and t.early_stopping_patience
            assert recipe.data.validation or recipe.data.validation_fraction
        for config in re.findall(r"--config_file (training/\S+\.yaml)", text):
            assert (ROOT / config).exists(), f"{name} names {config}, which is not in the repository"


def test_the_cpu_rta_recipe_holds_what_its_comment_says(monkeypatch):
    """training/smollm2_cpu_rta.yaml: SFT-RTA of SmolLM2-135M-Instruct on 16 bundled NQ questions, on the CPU,
    a plain model folder at runs/smollm2-cpu-rta; the smoke settings below keep it to a few minutes on 2 cores."""
    from transformers import AutoConfig

    from icr2_components.models import resolve_model
    from icr2_components.training.model_loading import effective_max_length

    monkeypatch.chdir(ROOT)
    recipe = load_recipe("training/smollm2_cpu_rta.yaml")
    assert (recipe.method, recipe.model, recipe.output_dir) == ("rta", "smollm2-135m-instruct", "runs/smollm2-cpu-rta")
    sample = recipe.data.build_sample
    assert (sample.limit, sample.budget_passages, sample.offset, sample.retrievers) == (16, 3, 0, ["bm25"])
    assert recipe.data.validation_fraction == 0.25 and recipe.finetuning == "full"  # plain folder, no adapters
    t = recipe.training
    assert (t.device, t.dtype, t.max_steps, t.per_device_train_batch_size, t.gradient_accumulation_steps) == (
        "cpu", "float32", 8, 1, 2)
    assert (t.eval_steps, t.save_steps, t.early_stopping_patience) == (4, 4, 2)
    assert t.learning_rate == pytest.approx(1e-5) and t.new_token_learning_rate == pytest.approx(5e-3)
    # its sequence length fits the model it names
    config = AutoConfig.from_pretrained(resolve_model(recipe.model))
    assert effective_max_length(config, recipe.max_seq_length) == recipe.max_seq_length == 1024


def test_a_broken_copy_of_a_committed_recipe_is_refused_naming_the_key(tmp_path, monkeypatch):
    """The loader validates (the tests above would pass on a loader that accepted anything otherwise)."""
    monkeypatch.chdir(ROOT)
    data = yaml.safe_load((TRAINING / "smollm2_cpu_rta.yaml").read_text())
    data["training"]["max_stpes"] = data["training"].pop("max_steps")
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError, match="max_stpes"):
        load_recipe(path)
    data = yaml.safe_load((TRAINING / "smollm2_cpu_rta.yaml").read_text())
    data["training"]["eval_steps"] = -4
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError, match="eval_steps"):
        load_recipe(path)


@pytest.mark.parametrize("name", ACCELERATE)
def test_accelerate_configs_parse_and_name_their_distribution(name):
    data = yaml.safe_load((TRAINING / name).read_text())
    if name == "accelerate_cpu_ddp.yaml":  # accelerate's torchrun launcher; the recipe's device: cpu makes it gloo DDP
        assert data["distributed_type"] == "MULTI_GPU" and data["use_cpu"] is False and data["num_processes"] == 2
        assert data["mixed_precision"] == "no"
        return
    expected = {"accelerate_deepspeed_zero3.yaml": "DEEPSPEED", "accelerate_fsdp.yaml": "FSDP"}[name]
    assert data["distributed_type"] == expected and data["mixed_precision"] == "bf16"
