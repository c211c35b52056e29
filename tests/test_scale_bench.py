"""The scale bench's generated corpus (bench/scale_corpus.py): seeded, marked, made only of the sample's own words,
and vectors that are unit length and near the real embeddings they are drawn around; and its --sizes parsing
(bench/scale.py). Real inputs: the bundled sample's passages and all-MiniLM-L6-v2 vectors of some of them. No
timing here (the bench measures cost).
"""

from __future__ import annotations

import importlib.util
import sys
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_bench(name: str, module_name: str):
    """``bench/<name>.py`` loaded by path (bench/ is scripts, not a package) as ``module_name``."""
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus_module():
    # under its own name, so that bench/scale.py's ``from scale_corpus import ...`` finds this same module
    return load_bench("scale_corpus", "scale_corpus")


@pytest.fixture(scope="module")
def scale():
    return load_bench("scale", "bench_scale")


@pytest.fixture(scope="module")
def real(corpus_module):
    return corpus_module.real_passages()


@pytest.mark.unit
def test_generated_text_is_seeded_and_drawn_only_from_the_sample(corpus_module, real):
    texts, titles = [d.content for d in real], [d.meta["title"] for d in real]
    sampler = corpus_module.BigramSampler(texts, titles, seed=7, words=100)
    again = corpus_module.BigramSampler(texts, titles, seed=7, words=100)
    other = corpus_module.BigramSampler(texts, titles, seed=8, words=100)
    bigrams = {pair for text in texts for pair in zip(text.split(), text.split()[1:], strict=False)}
    for position in (0, 1, 12345, 999_999):
        title, text = sampler.passage(position)
        assert (title, text) == again.passage(position), "the same seed and position must give the same passage"
        assert text != other.passage(position)[1], "another seed must give another passage"
        words = text.split()
        assert len(words) == 100
        assert set(words) <= sampler.vocabulary and set(title.lower().split()) <= {
            w.lower() for w in sampler.title_vocabulary
        }
        # made of real bigrams: every (even, odd) pair of words follows each other somewhere in a real passage
        assert all((words[i], words[i + 1]) in bigrams for i in range(0, 100, 2))
    assert sampler.passage(0) != sampler.passage(1)
    assert sampler.vocabulary == {word for text in texts for word in text.split()}


@pytest.mark.unit
def test_corpus_streams_real_then_generated_passages_clearly_marked(corpus_module, real):
    corpus = corpus_module.ScaleCorpus(
        real[:30],
        corpus_module.BigramSampler([d.content for d in real[:30]], [d.meta["title"] for d in real[:30]], seed=0),
        None,
    )
    stream = corpus.documents(100, with_vectors=False)
    assert iter(stream) is stream, "the corpus must be a stream, not a list held in memory"
    documents = list(stream)
    assert len(documents) == 100 and len({d.id for d in documents}) == 100
    assert [d.id for d in documents[:30]] == [d.id for d in real[:30]]
    assert all(
        d.meta["generated"] is False and not d.id.startswith(corpus_module.GENERATED_PREFIX) for d in documents[:30]
    )
    generated = documents[30:]
    assert corpus.generated_count(100) == 70
    assert all(
        d.meta["generated"] is True and d.id.startswith(corpus_module.GENERATED_PREFIX) and d.meta["title"]
        for d in generated
    )
    assert [d.content for d in islice(corpus.documents(100, with_vectors=False), 30, 40)] == [
        d.content for d in generated[:10]
    ]
    # a smaller size is a prefix of a larger one (same seed): sizes share their passages
    assert [d.id for d in corpus.documents(10, with_vectors=False)] == [d.id for d in documents[:10]]


def test_drawn_vectors_are_unit_length_and_near_their_real_seed_vectors(corpus_module, real):
    vectors = corpus_module.real_embeddings(real[:40], progress=False)
    assert vectors.shape == (40, 384)
    sampler = corpus_module.NoisyVectorSampler(vectors, seed=3, noise=0.75)
    seeds = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosines = []
    for position in range(300):
        vector, source = sampler.vector(position)
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5
        np.testing.assert_array_equal(vector, sampler.vector(position)[0])
        cosines.append(float(vector @ seeds[source]))
        # nearer its own seed than a typical other real passage's vector
        assert float(vector @ seeds[source]) > float(np.median(seeds @ vector))
    assert abs(np.mean(cosines) - sampler.expected_cosine()) < 0.02
    assert len({sampler.vector(p)[1] for p in range(300)}) > 30, "seeds are drawn from many real vectors"
    corpus = corpus_module.ScaleCorpus(
        real[:40],
        corpus_module.BigramSampler([d.content for d in real[:40]], [d.meta["title"] for d in real[:40]]),
        sampler,
    )
    document = next(islice(corpus.documents(41), 40, None))
    assert document.meta["generated"] is True and len(document.embedding) == 384


@pytest.mark.unit
def test_sizes_are_parsed_and_bad_ones_refused_with_one_line(scale):
    assert scale.parse_sizes("2000, 10k,1M") == [2000, 10_000, 1_000_000]
    for bad, words in (
        ("10000,2000", "increasing"),
        ("0", "positive"),
        ("ten", "not a number"),
        ("", "at least one"),
        ("1.5k,2.5", "whole"),
    ):
        with pytest.raises(ValueError, match=words) as error:
            scale.parse_sizes(bad)
        assert "\n" not in str(error.value)
