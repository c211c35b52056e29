"""Probing attention heads on validation instances: which heads retrieve (RAP, ICR2 section 4.2) and which push
the answer toward the context or the model's memory (PH3, CUB). A job that writes the artifacts the components
read; it uses components (the corpus builder, the passage scoring) and evaluation data, so it sits above them.
"""
