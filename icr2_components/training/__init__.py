"""Training: retrieve-then-generate SFT (DA, RTA, CCI; ICR2 4.1) and the jointly trained retrieval head (4.3).

Heavy imports (Trainer, peft, accelerate) happen inside the functions that need them.
"""

from icr2_components.text.retrieval_replies import (
    RETRIEVAL_END,
    RETRIEVAL_START,
    SFT_METHODS,
    ParsedGeneration,
    UnknownMethodError,
    format_target,
    parse_generation,
)
from icr2_components.training.examples import EncodedExample, SequenceTooLongError, encode_example
from icr2_components.training.recipe import METHODS, RecipeError, TrainingRecipe, load_recipe, recipe_from_dict
from icr2_components.training.special_tokens import add_retrieval_tokens

__all__ = [
    "EncodedExample",
    "METHODS",
    "ParsedGeneration",
    "RETRIEVAL_END",
    "RETRIEVAL_START",
    "RecipeError",
    "SFT_METHODS",
    "SequenceTooLongError",
    "TrainingRecipe",
    "UnknownMethodError",
    "add_retrieval_tokens",
    "encode_example",
    "format_target",
    "load_recipe",
    "parse_generation",
    "recipe_from_dict",
]
