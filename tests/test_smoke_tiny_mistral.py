"""The GPU smoke recipe on CPU (plumbing, random weights): ``scripts/smoke_tiny_mistral.sh cpu OUT`` runs SFT-RTA,
RAP probing of the fine-tuned reader and the jointly trained retrieval head in bf16 on ``tiny-random-mistral``,
the GPU recipes' reader architecture (MistralForCausalLM, grouped-query attention, rope base 1e6) built from its
config with random weights: nothing is downloaded. On a GPU the same script runs with ``cuda``
(docs/benchmarks/rap-and-heads.md, "GPU smoke recipe", says where its figures go).

On CPU the run's contexts hold 2 passages instead of the recipe's 3 (``--set data.build_sample.budget_passages=2``,
the fewest the sample builder takes: the retrieval head still scores a gold passage against a distractor): 235
instead of 353 tokens an example on a CPU with no bf16 matrix unit (a bf16 matmul about 10x an fp32 one), 144 s
against 164 s for the script back to back (docs/benchmarks/ci.md, "CI time")."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_tiny_random_mistral_is_the_gpu_readers_architecture_plumbing():
    from icr2_components.models import resolve_model
    from icr2_components.training.requirements import KNOWN_CONFIGS

    config = json.loads((Path(resolve_model("tiny-random-mistral")) / "config.json").read_text())
    gpu_reader = yaml.safe_load((ROOT / "training" / "mistral7b_gpu_rta.yaml").read_text())["model"]
    assert (
        config["architectures"] == ["MistralForCausalLM"]
        and config["model_type"] == KNOWN_CONFIGS[gpu_reader]["model_type"]
    )
    assert config["num_key_value_heads"] < config["num_attention_heads"]  # grouped-query attention, as Mistral-7B
    rope = config.get("rope_parameters") or {"rope_theta": config.get("rope_theta")}
    assert rope["rope_theta"] == 1e6
    for name in ("smoke_tiny_mistral_rta.yaml", "smoke_tiny_mistral_retrieval_head.yaml"):
        recipe = yaml.safe_load((ROOT / "training" / name).read_text())
        assert recipe["model"] == "tiny-random-mistral" and recipe["training"]["device"] == "cuda"
        assert recipe["training"]["dtype"] == "bfloat16" and recipe["training"]["bf16"] is True


def test_the_gpu_smoke_recipe_runs_on_cpu_in_bf16_plumbing(tmp_path):
    from safetensors import safe_open

    out = tmp_path / "smoke"
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HAYSTACK_TELEMETRY_ENABLED="False",
               ICR2=str(Path(sys.executable).with_name("icr2")))
    run = subprocess.run(["bash", "scripts/smoke_tiny_mistral.sh", "cpu", str(out),
                          "--set", "data.build_sample.budget_passages=2"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    report = json.loads((out / "smoke_report.json").read_text())
    assert set(report["seconds"]) == {"sft", "rap", "head"} and report["device"] == "cpu"

    # SFT: 8 steps in bf16; the weights are saved in bf16; the loss on the first examples fell (lr 1e-3)
    assert report["sft"]["global_steps"] == 8
    assert report["sft"]["first_examples_loss_after"] < report["sft"]["first_examples_loss_before"]
    with safe_open(str(out / "rta" / "model.safetensors"), "pt") as weights:
        assert {str(weights.get_tensor(k).dtype) for k in weights.keys()} == {"torch.bfloat16"}  # noqa: SIM118 - safe_open is not iterable
    assert (out / "rta" / "training_ids.json").exists()
    train = [json.loads(line) for line in (out / "rta" / "data" / "train.jsonl").read_text().splitlines()]
    assert train and all(len(example["context"]) == 2 for example in train)  # the CPU run's shorter contexts
    # RAP: Q = 4 heads probed on the fine-tuned folder, on 8 instances
    rap = json.loads((out / "rap_heads.json").read_text())
    assert len(rap["heads"]) == 4 and rap["instances"] == 8 and rap["model"] == str(out / "rta")
    # the retrieval head: 8 joint steps with the reader trained too, evaluated on its validation split
    assert report["retrieval_head"]["steps"] == 8 and report["retrieval_head"]["validation"] is not None
    head = json.loads((out / "head" / "retrieval_head" / "config.json").read_text())
    assert head["model"] == str((out / "head").resolve()) and head["top_k"] == 2
    assert (out / "head" / "retrieval_head" / "training_ids.json").exists()
    assert "needs: device cpu (no GPU)" in run.stdout
