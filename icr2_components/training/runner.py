"""``run_recipe``: what ``icr2 train`` calls — SFT for da/rta/cci, joint head training for retrieval_head."""

from __future__ import annotations

from typing import Any

from icr2_components.training.recipe import TrainingRecipe


def run_recipe(recipe: TrainingRecipe, progress: bool = True) -> dict[str, Any]:
    """Train as ``recipe.method`` says and return the training summary (also written to output_dir)."""
    if recipe.method == "retrieval_head":
        from icr2_components.training.joint import train_retrieval_head

        return train_retrieval_head(recipe, progress=progress)
    from icr2_components.training.sft import train_sft

    return train_sft(recipe, progress=progress).summary
