"""Answer normalisation and the exact (prefix-filtered) near-duplicate index, against brute force on real passages."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icr2_components.builders.near_duplicates import NearDuplicateIndex, jaccard, prefix_length, word_shingles
from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.text.normalization import contains_answer, normalize_text

pytestmark = pytest.mark.unit


def test_the_builders_loose_normalisation():
    """The corpus builder's exclusion normalisation (not the scorers' official one, see test_official_metrics.py):
    punctuation turned into spaces, accents folded."""
    assert normalize_text("The  Eiffel-Tower, in PARIS!") == "eiffel tower in paris"
    assert normalize_text("Wilhelm Conrad Röntgen") == "wilhelm conrad rontgen"
    assert contains_answer("awarded in 1901 to Wilhelm Conrad Röntgen, of Germany", ["Wilhelm Conrad Rontgen"])
    assert not contains_answer("awarded in 1901 to a German physicist", ["Röntgen"])
    # an answer that normalises to nothing never matches (it would match every passage)
    assert not contains_answer("any text at all", ["The", "!!"])


@pytest.fixture(scope="module")
def passages(sample_files):
    texts = []
    for document in KiltKnowledgeSource(sample_files.corpus).documents():
        texts.append(normalize_text(document.content))
        if len(texts) == 300:
            break
    return texts


def _perturb(text: str, rng: random.Random, edits: int) -> str:
    words = text.split()
    for _ in range(edits):
        action = rng.random()
        position = rng.randrange(len(words) + 1)
        if action < 0.4 and words:
            del words[min(position, len(words) - 1)]
        elif action < 0.8:
            words.insert(position, rng.choice(["river", "lake", "1999", "crown", "the"]))
        else:
            words = words[position:] + words[:position]
    return " ".join(words)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), threshold=st.sampled_from([0.5, 0.7, 0.8, 0.9, 1.0]), edits=st.integers(0, 12))
def test_prefix_filtered_index_finds_exactly_what_brute_force_finds(passages, seed, threshold, edits):
    rng = random.Random(seed)
    kept = rng.sample(passages, 40)
    index = NearDuplicateIndex(threshold)
    sets = []
    for key, text in enumerate(kept):
        shingles = word_shingles(text)
        index.add(str(key), shingles)
        sets.append(shingles)
    probes = [_perturb(rng.choice(kept), rng, edits) for _ in range(10)] + rng.sample(passages, 10)
    for probe in probes:
        shingles = word_shingles(probe)
        brute = any(jaccard(shingles, other) >= threshold for other in sets)
        found = index.find(shingles)
        assert (found is not None) == brute
        if found is not None:
            assert jaccard(shingles, sets[int(found)]) >= threshold


def test_prefix_length_bounds():
    assert prefix_length(100, 0.8) == 21
    assert prefix_length(100, 1.0) == 1
    assert prefix_length(1, 0.8) == 1
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        NearDuplicateIndex(0.0)
