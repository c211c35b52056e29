"""icr2_components: Haystack 3 components for long-context retrieval-augmented generation."""

from icr2_components._environment import apply_environment_defaults

apply_environment_defaults()

__version__ = "0.1.0"
