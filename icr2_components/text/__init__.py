"""Text shared by every floor: the corpus-in-context prompt templates and the one answer normalisation."""
