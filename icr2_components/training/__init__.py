"""Training: retrieve-then-generate SFT (DA, RTA, CCI; ICR2 4.1) and the jointly trained retrieval head (4.3).

Heavy imports (Trainer, peft, accelerate) happen inside the functions that need them.
"""

from icr2_components.training.examples import SequenceTooLongError
from icr2_components.training.recipe import RecipeError, TrainingRecipe, load_recipe

__all__ = [
    "RecipeError",
    "SequenceTooLongError",
    "TrainingRecipe",
    "load_recipe",
]
