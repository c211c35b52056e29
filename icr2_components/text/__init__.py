"""Text shared by every floor: the corpus-in-context prompt templates and the answer normalisations (the official
SQuAD/KILT one every scorer uses, and the builder's looser exclusion one; see ``normalization``)."""
