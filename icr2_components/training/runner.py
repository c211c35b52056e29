"""``run_recipe``: what ``icr2 train`` calls — what the recipe needs is said and checked first
(``training.requirements``), then SFT for da/rta/cci or joint head training for retrieval_head."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from icr2_components.training.recipe import TrainingRecipe


def check_recipe_needs(recipe: TrainingRecipe, announce: Callable[[str], Any] | None = None):
    """Say what ``recipe`` needs (``announce``) and refuse it when this machine cannot give it
    (``MachineError``); returns the :class:`RecipeNeeds`. Loads no weights."""
    from icr2_components.training.requirements import check_machine, recipe_needs
    from icr2_components.training.trained_ids import is_main_process

    needs = recipe_needs(recipe)
    if announce is not None and is_main_process():
        announce(needs.describe())
    check_machine(needs)
    return needs


def run_recipe(
    recipe: TrainingRecipe, progress: bool = True, announce: Callable[[str], Any] | None = None
) -> dict[str, Any]:
    """Check the machine (``check_recipe_needs``), train as ``recipe.method`` says and return the training summary
    (also written to output_dir, with the needs under ``needs``)."""
    needs = check_recipe_needs(recipe, announce)
    if recipe.method == "retrieval_head":
        from icr2_components.training.joint import train_retrieval_head

        summary = train_retrieval_head(recipe, progress=progress)
    else:
        from icr2_components.training.sft import train_sft

        summary = train_sft(recipe, progress=progress).summary
    summary["needs"] = needs.as_dict()
    return summary
