"""Probing attention heads on validation instances: which heads retrieve (RAP, ICR2 section 4.2) and which push
the answer toward the context or the model's memory (PH3, CUB). A job that writes the artifacts the components
read. It sits with the component that uses the heads (DESIGN: probing is no floor of its own), so it reads only
the ground floor: questions and CUB context sets from ``kilt``, attention taps from ``models``.
"""
