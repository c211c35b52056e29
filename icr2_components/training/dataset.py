"""Reading an ICR2 benchmark JSONL into encoded SFT examples, with every skipped record counted."""

from __future__ import annotations

import os
from dataclasses import dataclass

from icr2_components.kilt.icr2_benchmark import read_icr2_benchmark
from icr2_components.records import SkipReport
from icr2_components.text.retrieval_replies import check_method
from icr2_components.training.examples import EncodedExample, encode_example


@dataclass
class LoadedExamples:
    examples: list[EncodedExample]
    skips: SkipReport
    dropped_passages: int

    def features(self) -> list[dict[str, list[int]]]:
        return [example.as_features() for example in self.examples]


def load_sft_examples(
    path: str | os.PathLike,
    tokenizer,
    method: str,
    max_length: int,
    truncation: str = "drop_distractors",
    limit: int | None = None,
) -> LoadedExamples:
    """Encode every usable record of ``path`` for ``method``.

    Records whose gold ids are not all in their context, malformed records and examples too long for
    ``max_length`` are counted in ``skips`` (never dropped silently); if nothing is left this raises, naming
    the reasons.

    Usage:
        >>> loaded = load_sft_examples("train.jsonl", tokenizer, "rta", max_length=2048)
        >>> loaded.skips.summary()
    """
    check_method(method)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Benchmark file not found: {path}. Build one with `icr2 build-benchmark`.")
    skips = SkipReport(source=str(path))
    examples: list[EncodedExample] = []
    dropped = 0
    for instance in read_icr2_benchmark(path, skips):
        if limit is not None and len(examples) >= limit:
            break
        if not instance.answers or not str(instance.answers[0]).strip():
            skips.skip("no answer", detail=instance.id)
            continue
        example = encode_example(
            tokenizer, instance.id, instance.query, str(instance.answers[0]), instance.documents(),
            instance.gold_passage_ids, method, max_length, instance.task_type, truncation,
        )
        if example is None:
            skips.skip("longer than max_seq_length", detail=instance.id)
            continue
        dropped += example.dropped_passages
        examples.append(example)
    if not examples:
        raise ValueError(f"No usable training example in {path}: {skips.summary()}.")
    return LoadedExamples(examples, skips, dropped)
