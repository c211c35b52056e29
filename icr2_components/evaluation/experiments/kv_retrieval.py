"""Lost in the Middle's synthetic key-value retrieval (section 4, figure 10): the examples, and the asked pair moved
to each position the paper reports.

The examples are the paper's released files (``kv-retrieval-75_keys.jsonl.gz``, ``kv-retrieval-140_keys.jsonl.gz``:
500 each, ``ordered_kv_records`` as ``[key, value]`` pairs, the asked ``key`` and its ``value``). For a position the
asked pair is taken out of the object and put back at that place, the other pairs keeping their order, as the
paper's experiment does (its figure 9).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from icr2_components.builders.key_value_prompt_builder import key_value_prompt
from icr2_components.errors import UserInputError
from icr2_components.evaluation.experiments.curve import CurveExperiment
from icr2_components.evaluation.experiments.protocol import (
    Condition,
    PreparedData,
    Refusal,
    Variant,
    condition_question_id,
    register_experiment,
)
from icr2_components.evaluation.metrics.key_value_match import key_value_match

# 1-based positions of the asked pair plotted in figure 10, per object size
PAPER_POSITIONS: dict[int, tuple[int, ...]] = {
    75: (1, 25, 50, 75),
    140: (1, 35, 70, 105, 140),
    300: (1, 50, 100, 150, 200, 250, 300),
}


@dataclass(frozen=True)
class KeyValueExample:
    """One example: the object's pairs in the released order, the asked key and its value; ``line`` is the 1-based
    line of the file it came from."""

    pairs: tuple[tuple[str, str], ...]
    key: str
    value: str
    line: int

    def at_position(self, position: int) -> list[list[str]]:
        """The pairs with the asked one moved to ``position`` (1-based), the others in their order."""
        if not isinstance(position, int) or isinstance(position, bool) or not 1 <= position <= len(self.pairs):
            raise UserInputError(f"position must be an integer in 1..{len(self.pairs)} for an object of "
                                 f"{len(self.pairs)} pairs, got {position!r}.")
        others = [list(pair) for pair in self.pairs if pair[0] != self.key]
        others.insert(position - 1, [self.key, self.value])
        return others


def kv_retrieval_file(keys: int, data_dir: str | os.PathLike | None = None) -> Path:
    """The released file for objects of ``keys`` pairs in ``data_dir`` (default: the shared data folder)."""
    from icr2_components.kilt.sample import shared_data_dir

    folder = Path(data_dir) if data_dir is not None else shared_data_dir()
    path = folder / f"kv-retrieval-{keys}_keys.jsonl.gz"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not there: the key-value retrieval examples for {keys} pairs are the "
                                "paper's released files (kv-retrieval-<keys>_keys.jsonl.gz) in the data folder.")
    return path


def read_kv_examples(path: str | os.PathLike, limit: int | None = None) -> Iterator[KeyValueExample]:
    """The examples of a released file (gzip or plain JSONL), in file order; a record that is not a well-formed
    example (the key not among the pairs once, its value not the pair's) is an error naming its line."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        count = 0
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if limit is not None and count >= limit:
                return
            try:
                record = json.loads(line)
                pairs = tuple((str(k), str(v)) for k, v in record["ordered_kv_records"])
                key, value = str(record["key"]), str(record["value"])
            except (ValueError, KeyError, TypeError) as error:
                raise UserInputError(f"{path}:{line_number}: not a key-value example ({error}).") from error
            matches = [v for k, v in pairs if k == key]
            if matches != [value]:
                raise UserInputError(f"{path}:{line_number}: the asked key is among the pairs {len(matches)} time(s) "
                                     "or its value differs from the record's `value`.")
            count += 1
            yield KeyValueExample(pairs, key, value, line_number)


# -- the registered experiment (``icr2 reproduce kv-retrieval``) ---------------------------------------------------

def _pipeline_yaml(query_aware: bool) -> dict:
    """Figure 7's prompt (query-aware or not) and the bundled reader; the pairs come as passages (one Document a
    pair, the key as its title), so compare's ``corpus`` context type hands each question its object in order."""
    return {
        "components": {
            "prompt": {"type": "icr2_components.builders.key_value_prompt_builder.KeyValueRetrievalPromptBuilder",
                       "init_parameters": {"query_aware": query_aware, "key_field": "title"}},
            "reader": {"type": "icr2_components.readers.local_chat_reader.LocalChatReader",
                       "init_parameters": {"model": "smollm2-135m-instruct", "max_new_tokens": 48,
                                           "dtype": "float32"}},
        },
        "connections": [{"sender": "prompt.prompt", "receiver": "reader.messages"}],
        "metadata": {"technique": "kv_retrieval_query_aware" if query_aware else "kv_retrieval",
                     "context_input": "prompt.documents"},
        "inputs": {"query": "prompt.key", "documents": "prompt.documents"},
        "outputs": {"replies": "reader.replies"},
    }


def synthetic_pairs(keys: int, seed: int = 0) -> list[list[str]]:
    """``keys`` pairs of random version-4 UUIDs, as the paper makes them: only to count a prompt's tokens for a
    size whose released file is absent (a UUID's tokens do not depend on which UUID it is, to a token or two)."""
    import random
    import uuid

    generator = random.Random(seed)

    def one() -> str:
        return str(uuid.UUID(int=generator.getrandbits(128), version=4))

    return [[one(), one()] for _ in range(keys)]


def prompt_fit(reader, messages, max_new_tokens: int) -> tuple[int | None, int | None]:
    """``(prompt tokens, most prompt tokens the model takes with max_new_tokens kept free)`` as the reader counts
    them: an in-process reader with its model's tokenizer and chat template, a served one with the server's
    tokenizer and context; ``(None, None)`` when the reader cannot say."""
    from icr2_components.errors import ContextTooLongError

    chat_model = getattr(reader, "chat_model", None)
    if chat_model is not None and callable(getattr(chat_model, "encode", None)):
        try:
            encoded = chat_model.encode(messages, max_new_tokens)
        except ContextTooLongError as error:
            return error.prompt_tokens, error.limit
        return int(encoded["input_ids"].shape[1]), chat_model.context_limit() - max_new_tokens
    served = getattr(reader, "served", None)
    if served is not None and callable(getattr(reader, "prompt_tokens", None)):
        context = served.resolved_context_length()
        return reader.prompt_tokens(messages), (context - max_new_tokens) if context else None
    return None, None


@register_experiment
class KeyValueRetrieval(CurveExperiment):
    name = "kv-retrieval"
    paper = ("Liu et al. 2024, \"Lost in the Middle: How Language Models Use Long Contexts\" (TACL; "
             "arXiv:2307.03172), section 4, figures 7-10")
    title = "synthetic key-value retrieval"
    claim = ("The paper finds accuracy highest when the asked pair is at the start or the end of the JSON "
             "object and lowest in the middle, lower with more pairs, and near perfect for every model once the "
             "key is also asked before the object (query-aware contextualization, section 4.2).")
    questions = ("the paper's released examples, kv-retrieval-<75|140|300>_keys.jsonl.gz in the data folder "
                 "(ICR2_DATA_DIR, default ../shared/data; 500 each, 300 keys not shipped there), the first N "
                 "in file order; the asked pair moved to each of figure 10's positions, the others in their "
                 "released order. A size whose prompt does not fit the model's context (counted with its own "
                 "tokenizer) is refused with the count.")
    metric = "accuracy: the asked value appears in the reply (the paper's rule, key_value_match)"
    registered_size = 100
    registered_max_new_tokens = 48
    seeds: ClassVar[dict[str, int]] = {"stats_seed": 0, "token_count_seed": 0}
    figure_title = "the paper's figure 10"
    x_label = "position of the asked pair"
    paper_notes = (
        "Figure 10 is a plot: the paper prints no per-position numbers for it, so none are shown as lines.",
        "Printed in section 4.2: GPT-3.5-Turbo (16K) reaches a lowest accuracy of 45.6% over the positions with "
        "300 pairs, and 100% at every position with query-aware contextualization.",
        "Printed in section 4.2: claude-1.3 and claude-1.3-100k are nearly perfect at every length.",
    )

    def conditions(self) -> list[Condition]:
        return [Condition(f"{keys}keys@{position}", f"{keys} key-value pairs", position,
                          f"{keys} pairs, asked pair at {position}")
                for keys, positions in PAPER_POSITIONS.items() for position in positions]

    def variants(self) -> list[Variant]:
        return [Variant("kv_retrieval", "figure 7's prompt"),
                Variant("kv_retrieval_query_aware", "query-aware (the key before and after the object)")]

    def write_pipelines(self, folder: Path) -> list[Path]:
        import yaml

        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for variant, aware in zip(self.variants(), (False, True), strict=True):
            path = folder / f"{variant.name}.yaml"
            path.write_text(yaml.safe_dump(_pipeline_yaml(aware), sort_keys=False))
            paths.append(path)
        return paths

    def refusals(self, conditions, reader, max_new_tokens: int) -> list[Refusal]:
        from haystack.dataclasses import ChatMessage

        refused = []
        for keys in dict.fromkeys(int(c.name.split("keys@")[0]) for c in conditions):
            try:
                pairs = [list(p) for p in next(read_kv_examples(kv_retrieval_file(keys), limit=1)).pairs]
                where = "the first released example"
                missing = None
            except FileNotFoundError as error:
                pairs, where, missing = synthetic_pairs(keys, self.seeds["token_count_seed"]), \
                    f"{keys} random UUID pairs", str(error)
            # the query-aware prompt is the longer one
            messages = [ChatMessage.from_user(key_value_prompt([tuple(p) for p in pairs], pairs[0][0], True))]
            tokens, limit = prompt_fit(reader, messages, max_new_tokens)
            reason = None
            if tokens is not None and limit is not None and tokens > limit:
                reason = (f"the {keys}-pair prompt ({where}, query-aware) has {tokens} tokens by the model's "
                          f"tokenizer, and the model takes {limit} ({limit + max_new_tokens} context minus "
                          f"max_new_tokens={max_new_tokens})")
            elif missing is not None:
                reason = missing
            if reason:
                refused += [Refusal(c.name, reason) for c in conditions if c.name.startswith(f"{keys}keys@")]
        return refused

    def prepare(self, conditions, limit, folder: Path, progress: bool = True) -> PreparedData:
        size = limit or self.registered_size
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "conditions.jsonl"
        ids: list[str] = []
        sizes = {}
        with path.open("w", encoding="utf-8") as handle:
            for keys in dict.fromkeys(int(c.name.split("keys@")[0]) for c in conditions):
                examples = list(read_kv_examples(kv_retrieval_file(keys), limit=size))
                sizes[keys] = len(examples)
                for example in examples:
                    base = f"kv-{example.line:04d}"
                    if base not in ids:
                        ids.append(base)
                    for condition in (c for c in conditions if c.name.startswith(f"{keys}keys@")):
                        moved = example.at_position(condition.x)
                        context = [{"passage_id": f"KV{i:03d}", "doc_id": f"{base}-{keys}-{k}", "title": k,
                                    "text": v, "origin": "gold" if k == example.key else "distractor"}
                                   for i, (k, v) in enumerate(moved, start=1)]
                        handle.write(json.dumps({
                            "id": condition_question_id(base, condition.name), "query": example.key,
                            "answers": [example.value], "task_type": "qa", "context": context,
                            "gold_passage_ids": [f"KV{condition.x:03d}"]}) + "\n")
        # a question counts where every group has it: 75 and 140 keys have the same number of examples
        return PreparedData(path, ids, None, {"examples_per_size": sizes, "in_file_order": True})

    def score(self, reply: str, answers: list[str]) -> bool:
        return any(key_value_match(reply, answer) for answer in answers)

