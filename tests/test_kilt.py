"""KILT readers, chunking and provenance mapping, on the real sample and on hand-written bad input."""

import json

import pytest

from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.kilt.chunking import chunk_article
from icr2_components.kilt.tasks import PassageSpanIndex, Provenance, read_kilt_tasks
from icr2_components.records import SkipReport
from icr2_components.records.reading import open_text

pytestmark = pytest.mark.unit


def test_chunking_counts_words_and_keeps_exact_offsets():
    paragraphs = ["Title", "one two three four five", "six seven eight", "nine ten eleven twelve"]
    passages = chunk_article("42", "Title", paragraphs, passage_words=5)
    assert [p.text.split() for p in passages] == [
        ["one", "two", "three", "four", "five"],
        ["six", "seven", "eight", "nine", "ten"],
        ["eleven", "twelve"],
    ]
    second = passages[1]
    # spans a paragraph boundary: starts in paragraph 2 at char 0, ends in paragraph 3 after "ten"
    assert (second.start_paragraph_id, second.start_character) == (2, 0)
    assert (second.end_paragraph_id, second.end_character) == (3, len("nine ten"))
    assert paragraphs[3][: second.end_character] == "nine ten"
    # deterministic ids that include the chunk size
    assert [p.id for p in passages] == ["42-w5-00000", "42-w5-00001", "42-w5-00002"]
    assert chunk_article("42", "Title", paragraphs, passage_words=5) == passages


def test_chunking_rejects_bad_size_and_handles_empty_article():
    with pytest.raises(ValueError, match="passage_words"):
        chunk_article("1", "T", ["T", "text"], passage_words=0)
    assert chunk_article("1", "T", ["T"]) == []


def test_knowledge_source_counts_bad_lines_and_goes_on(tmp_path):
    path = tmp_path / "ks.jsonl"
    lines = [
        json.dumps({"wikipedia_id": "1", "wikipedia_title": "A", "text": ["A", "alpha beta gamma"]}),
        "{not json",
        json.dumps({"wikipedia_id": "2", "text": ["B", "no title here"]}),
        json.dumps({"wikipedia_id": "3", "wikipedia_title": "C", "text": ["C"]}),
        json.dumps({"wikipedia_id": "4", "wikipedia_title": "D", "text": "not a list"}),
        json.dumps({"wikipedia_id": "5", "wikipedia_title": "E", "text": ["E", "epsilon zeta"]}),
    ]
    path.write_text("\n".join(lines) + "\n")
    source = KiltKnowledgeSource(path, passage_words=100)
    docs = list(source.documents())
    assert [d.meta["wikipedia_id"] for d in docs] == ["1", "5"]
    assert source.skips.counts == {
        "malformed JSON": 1,
        "missing fields": 1,
        "article with no text": 1,
        "text is not a list of paragraphs": 1,
    }
    assert source.skips.examples["malformed JSON"][0].startswith("line 2")
    assert "skipped 4" in source.skips.summary()


def test_task_reader_counts_bad_records(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps(
                    {
                        "id": "q1",
                        "input": "who?",
                        "output": [
                            {
                                "answer": "me",
                                "provenance": [
                                    {
                                        "wikipedia_id": "7",
                                        "start_paragraph_id": 1,
                                        "start_character": 0,
                                        "end_paragraph_id": 1,
                                        "end_character": 5,
                                    }
                                ],
                            }
                        ],
                    }
                ),
                json.dumps({"input": "no id"}),
                "[1, 2]",
                json.dumps({"id": "q3", "input": "  "}),
                json.dumps(
                    {"id": "q4", "input": "ok", "output": [{"answer": "x", "provenance": [{"title": "no id"}]}]}
                ),
            ]
        )
    )
    skips = SkipReport(source="tasks")
    tasks = list(read_kilt_tasks(path, skips))
    assert [t.id for t in tasks] == ["q1", "q4"]
    assert tasks[0].answers == ["me"] and tasks[0].provenance[0].wikipedia_id == "7"
    assert skips.counts["missing fields"] == 1
    assert skips.counts["not a JSON object"] == 1
    assert skips.counts["empty input"] == 1
    assert skips.counts["provenance entries without wikipedia_id"] == 1


def test_provenance_maps_to_overlapping_passages_only():
    paragraphs = ["T", "a b c d", "e f g h", "i j k l"]
    passages = chunk_article("9", "T", paragraphs, passage_words=3)
    index = PassageSpanIndex.from_passages(passages)
    # paragraph 2 ("e f g h") is covered by passage 1 ("d e f": ends in par 2) and passage 2 ("g h i")
    ids = index.gold_passage_ids(
        [Provenance("9", start_paragraph_id=2, start_character=0, end_paragraph_id=2, end_character=7)]
    )
    assert ids == [passages[1].id, passages[2].id]
    # a provenance inside paragraph 3 only, after "i"
    assert index.gold_passage_ids(
        [Provenance("9", start_paragraph_id=3, start_character=2, end_paragraph_id=3, end_character=7)]
    ) == [passages[3].id]
    # whole-article provenance and other articles
    assert len(index.gold_passage_ids([Provenance("9")])) == len(passages)
    assert index.gold_passage_ids([Provenance("10")]) == []


def test_sample_is_real_kilt_and_every_question_maps_to_a_gold_passage_containing_its_text(sample_files):
    assert sample_files.questions == 2655
    with open_text(sample_files.corpus) as handle:
        first = json.loads(handle.readline())
    assert set(first) >= {"wikipedia_id", "wikipedia_title", "text"}
    assert first["text"][0] == first["wikipedia_title"]

    source = KiltKnowledgeSource(sample_files.corpus)
    passages = {p.id: p for p in source.passages()}
    assert source.skips.total == 0
    index = PassageSpanIndex.from_passages(passages.values())
    tasks = list(read_kilt_tasks(sample_files.tasks))
    assert len(tasks) == 2655
    for task in tasks[:300]:
        gold = index.gold_passage_ids(task.provenance)
        assert gold, task.id
        # the gold passages together cover the first words of the provenance paragraph
        assert any(passages[g].title == task.provenance[0].title for g in gold)
    # answers are carried over
    assert tasks[0].input == "who got the first nobel prize in physics"
    assert "Wilhelm Conrad Röntgen" in tasks[0].answers
