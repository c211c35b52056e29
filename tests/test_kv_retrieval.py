"""Lost in the Middle's synthetic key-value retrieval: the prompt is figure 7's, the asked pair moves as in figure 9,
the scoring is the paper's rule (the value appears in the reply), and the released examples read as they are."""

from __future__ import annotations

import gzip
import json

import pytest
from haystack import Pipeline

from icr2_components.builders import KeyValueRetrievalPromptBuilder
from icr2_components.errors import UserInputError
from icr2_components.evaluation.experiments.kv_retrieval import (
    PAPER_POSITIONS,
    kv_retrieval_file,
    read_kv_examples,
)
from icr2_components.evaluation.metrics.key_value_match import key_value_match

pytestmark = pytest.mark.unit

# figure 7 of the paper: its five pairs, the key asked and the desired output
FIGURE_7_PAIRS = [
    ["2a8d601d-1d69-4e64-9f90-8ad825a74195", "bb3ba2a5-7de8-434b-a86e-a88bb9fa7289"],
    ["a54e2eed-e625-4570-9f74-3624e77d6684", "d1ff29be-4e2a-4208-a182-0cea716be3d4"],
    ["9f4a92b9-5f69-4725-ba1e-403f08dea695", "703a7ce5-f17f-4e6d-b895-5836ba5ec71c"],
    ["52a9c80c-da51-4fc9-bf70-4a4901bc2ac3", "b2f8ea3d-4b1b-49e0-a141-b9823991ebeb"],
    ["f4eb1c53-af0a-4dc4-a3a5-c2d50851a178", "d733b0d2-6af3-44e1-8592-e5637fdb76fb"],
]
FIGURE_7_KEY = "9f4a92b9-5f69-4725-ba1e-403f08dea695"
FIGURE_7_VALUE = "703a7ce5-f17f-4e6d-b895-5836ba5ec71c"
FIGURE_7_INPUT = """Extract the value corresponding to the specified key in the JSON object below.
JSON data:
{"2a8d601d-1d69-4e64-9f90-8ad825a74195": "bb3ba2a5-7de8-434b-a86e-a88bb9fa7289",
 "a54e2eed-e625-4570-9f74-3624e77d6684": "d1ff29be-4e2a-4208-a182-0cea716be3d4",
 "9f4a92b9-5f69-4725-ba1e-403f08dea695": "703a7ce5-f17f-4e6d-b895-5836ba5ec71c",
 "52a9c80c-da51-4fc9-bf70-4a4901bc2ac3": "b2f8ea3d-4b1b-49e0-a141-b9823991ebeb",
 "f4eb1c53-af0a-4dc4-a3a5-c2d50851a178": "d733b0d2-6af3-44e1-8592-e5637fdb76fb"}
Key: "9f4a92b9-5f69-4725-ba1e-403f08dea695"
Corresponding value:"""


def test_the_prompt_is_figure_7_and_the_query_aware_one_asks_first():
    result = KeyValueRetrievalPromptBuilder().run(pairs=FIGURE_7_PAIRS, key=FIGURE_7_KEY)
    assert result["prompt"][0].text == FIGURE_7_INPUT
    assert result["meta"] == {"pairs": 5, "position": 3}
    aware = KeyValueRetrievalPromptBuilder(query_aware=True).run(pairs=FIGURE_7_PAIRS, key=FIGURE_7_KEY)
    lines = aware["prompt"][0].text.splitlines()
    assert lines[1] == f'Key: "{FIGURE_7_KEY}"' and lines[-2] == lines[1] and lines[2] == "JSON data:"
    # the per-call switch overrides the constructor's
    assert KeyValueRetrievalPromptBuilder(query_aware=True).run(
        pairs=FIGURE_7_PAIRS, key=FIGURE_7_KEY, query_aware=False)["prompt"][0].text == FIGURE_7_INPUT


@pytest.mark.parametrize("reply, correct", [
    (FIGURE_7_VALUE, True),                                            # the desired output
    (f'The value is "{FIGURE_7_VALUE.upper()}".', True),               # in a sentence, another case
    (f"{FIGURE_7_KEY}: {FIGURE_7_VALUE}", True),                       # the pair repeated
    (FIGURE_7_VALUE[:-1], False),                                      # cut by one character
    ("bb3ba2a5-7de8-434b-a86e-a88bb9fa7289", False),                   # a neighbouring pair's value
    (FIGURE_7_KEY, False),                                             # the key, not the value
    ("703a7ce5 f17f 4e6d b895 5836ba5ec71c", False),                   # no hyphens: not the value
    ("", False),
])
def test_scoring_follows_the_papers_rule_on_hand_made_replies(reply, correct):
    assert key_value_match(reply, FIGURE_7_VALUE) is correct


def test_an_empty_value_is_refused_rather_than_found_everywhere():
    with pytest.raises(ValueError, match="non-empty"):
        key_value_match("anything", " ")


@pytest.mark.parametrize("keys", [75, 140])
def test_the_released_examples_read_and_the_asked_pair_moves_to_each_paper_position(keys):
    examples = list(read_kv_examples(kv_retrieval_file(keys)))
    assert len(examples) == 500 and all(len(e.pairs) == keys for e in examples)
    example = examples[0]
    builder = KeyValueRetrievalPromptBuilder()
    for position in PAPER_POSITIONS[keys]:
        moved = example.at_position(position)
        assert moved[position - 1] == [example.key, example.value]
        # the others keep their released order, the object keeps its size
        assert [p for p in moved if p[0] != example.key] == [list(p) for p in example.pairs if p[0] != example.key]
        assert builder.run(pairs=moved, key=example.key)["meta"]["position"] == position
    with pytest.raises(UserInputError, match=rf"1\.\.{keys}"):
        example.at_position(keys + 1)


def test_bad_inputs_are_refused_with_what_is_wrong(tmp_path):
    builder = KeyValueRetrievalPromptBuilder()
    with pytest.raises(UserInputError, match="non-empty list"):
        builder.run(pairs=[], key=FIGURE_7_KEY)
    with pytest.raises(UserInputError, match=r"pairs\[1\]"):
        builder.run(pairs=[FIGURE_7_PAIRS[2], ["only-a-key"]], key=FIGURE_7_KEY)
    with pytest.raises(UserInputError, match="2 time"):
        builder.run(pairs=[FIGURE_7_PAIRS[2], FIGURE_7_PAIRS[2]], key=FIGURE_7_KEY)
    with pytest.raises(UserInputError, match="0 time"):
        builder.run(pairs=FIGURE_7_PAIRS, key="not-a-key")
    with pytest.raises(UserInputError, match="query_aware"):
        KeyValueRetrievalPromptBuilder(query_aware="yes")
    bad = tmp_path / "kv.jsonl.gz"
    with gzip.open(bad, "wt") as handle:
        handle.write(json.dumps({"ordered_kv_records": FIGURE_7_PAIRS, "key": FIGURE_7_KEY,
                                 "value": FIGURE_7_VALUE}) + "\n")
        handle.write(json.dumps({"ordered_kv_records": FIGURE_7_PAIRS, "key": FIGURE_7_KEY, "value": "other"}) + "\n")
    with pytest.raises(UserInputError, match=r"kv.jsonl.gz:2: .*value differs"):
        list(read_kv_examples(bad))
    with pytest.raises(FileNotFoundError, match="300"):
        kv_retrieval_file(300, tmp_path)


def test_the_builder_works_in_a_pipeline_built_in_python_and_in_yaml():
    pipeline = Pipeline()
    pipeline.add_component("prompt", KeyValueRetrievalPromptBuilder(query_aware=True))
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["icr2_components.*"])
    result = loaded.run({"prompt": {"pairs": FIGURE_7_PAIRS, "key": FIGURE_7_KEY}})
    assert result["prompt"]["prompt"][0].text.count(FIGURE_7_KEY) == 3  # before, in the object, after


def test_the_pairs_may_come_as_documents_one_a_pair():
    from haystack import Document

    documents = [Document(id=f"d{i}", content=value, meta={"title": key}) for i, (key, value) in
                 enumerate(FIGURE_7_PAIRS)]
    result = KeyValueRetrievalPromptBuilder().run(key=FIGURE_7_KEY, documents=documents)
    assert result["prompt"][0].text == FIGURE_7_INPUT and result["meta"] == {"pairs": 5, "position": 3}
    other = [Document(content=value, meta={"key": key}) for key, value in FIGURE_7_PAIRS]
    assert KeyValueRetrievalPromptBuilder(key_field="key").run(
        key=FIGURE_7_KEY, documents=other)["prompt"][0].text == FIGURE_7_INPUT
    with pytest.raises(UserInputError, match=r"documents\[0\].*meta\['title'\]"):
        KeyValueRetrievalPromptBuilder().run(key=FIGURE_7_KEY, documents=other)
    with pytest.raises(UserInputError, match="one of the two"):
        KeyValueRetrievalPromptBuilder().run(key=FIGURE_7_KEY, documents=documents, pairs=FIGURE_7_PAIRS)
    with pytest.raises(UserInputError, match="one of the two"):
        KeyValueRetrievalPromptBuilder().run(key=FIGURE_7_KEY)
