"""ICR2 prompt templates rendered through the real SmolLM2 chat template; exact passage spans."""

from __future__ import annotations

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from icr2_components.builders import CorpusInContextPromptBuilder
from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.kilt.tasks import read_kilt_tasks
from icr2_components.models.cache import MODEL_CACHE
from icr2_components.text.templates import ANSWER_INSTRUCTIONS, TASK_TYPES, format_passage, render_cic_prompt


@pytest.fixture(scope="module")
def tokenizer():
    return MODEL_CACHE.tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="module")
def corpus(sample_files):
    documents = []
    for document in KiltKnowledgeSource(sample_files.corpus).documents():
        documents.append(document)
        if len(documents) == 4:
            break
    # a title with a non-ASCII character, so character offsets differ from byte offsets
    documents[1].meta["title"] = "Röntgen – Überblick"
    return documents


@pytest.fixture(scope="module")
def question(sample_files):
    return next(read_kilt_tasks(sample_files.tasks)).input


QUERY_LABELS = {
    "qa": ("Question", "Answer:"),
    "fact_verification": ("Claim", "Judgement:"),
    "dialogue": ("Conversation", None),
}


@pytest.mark.parametrize("task_type", TASK_TYPES)
@pytest.mark.parametrize("query_aware", [False, True])
def test_each_template_puts_ids_and_query_where_the_paper_does(tokenizer, corpus, question, task_type, query_aware):
    rendered = render_cic_prompt(task_type, question, corpus, tokenizer=tokenizer, query_aware=query_aware)
    text = rendered.text
    label, answer_label = QUERY_LABELS[task_type]
    # SmolLM2's chat turns surround the user message; the generation prompt ends the text
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    user_start = text.index("<|im_start|>user\n") + len("<|im_start|>user\n")
    # the instruction opens the message, then the corpus PSG001..PSG004 in order, then the query, then the answer cue
    instruction_end = text.index(":\n", user_start)
    positions = [text.index(f"ID: PSG00{i}\n") for i in range(1, 5)]
    assert instruction_end < positions[0] < positions[1] < positions[2] < positions[3]
    final_query = text.rindex(f"\n\n{label}: {question}")
    assert final_query > positions[3]
    tail = text[final_query:]
    if answer_label:
        assert tail.startswith(f"\n\n{label}: {question}\n{answer_label}<|im_end|>")
    else:
        assert tail.startswith(f"\n\n{label}: {question}<|im_end|>")
    before_corpus = text[user_start : positions[0]]
    assert (f"{label}: {question}" in before_corpus) is query_aware
    assert len(rendered.query_char_spans) == (2 if query_aware else 1)
    for start, end in rendered.query_char_spans:
        assert text[start:end] == question
    # exact spans: each passage's block, title and text included
    assert list(rendered.passage_char_spans) == ["PSG001", "PSG002", "PSG003", "PSG004"]
    for pid, document in zip(rendered.passage_char_spans, corpus, strict=True):
        start, end = rendered.passage_char_spans[pid]
        assert text[start:end] == format_passage(pid, document.meta["title"], document.content)


def test_passage_spans_fall_on_token_boundaries_of_the_offset_mapping(tokenizer, corpus, question):
    """What Retrieval Attention Probing relies on: spans map to whole tokens with the offset mapping."""
    rendered = render_cic_prompt("qa", question, corpus, tokenizer=tokenizer, query_aware=True)
    encoded = tokenizer(rendered.text, add_special_tokens=False, return_offsets_mapping=True)
    starts = {s for s, _ in encoded["offset_mapping"]}
    ends = {e for _, e in encoded["offset_mapping"]}
    for start, end in rendered.passage_char_spans.values():
        assert start in starts and end in ends
    # and the tokens inside a span decode back to the block
    start, end = rendered.passage_char_spans["PSG002"]
    inside = [i for i, (s, e) in zip(encoded["input_ids"], encoded["offset_mapping"], strict=True)
              if s >= start and e <= end]
    assert tokenizer.decode(inside) == rendered.text[start:end]
    # the same token count the reader sees from apply_chat_template
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": rendered.messages[-1].text}], add_generation_prompt=True, tokenize=True
    )
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert len(ids) == len(encoded["input_ids"])


@pytest.mark.unit
def test_meta_passage_ids_are_shown_and_spans_keyed_by_them(corpus, question):
    documents = [
        Document(id=d.id, content=d.content, meta={**d.meta, "passage_id": f"PSG{9 - i:03d}"})
        for i, d in enumerate(corpus)
    ]
    rendered = render_cic_prompt("qa", question, documents)
    assert rendered.passage_ids == ["PSG009", "PSG008", "PSG007", "PSG006"]
    start, _ = rendered.passage_char_spans["PSG007"]
    assert rendered.text[start:].startswith(
        f"ID: PSG007\nTitle: {corpus[2].meta['title']}\nContext: {corpus[2].content[:20]}"
    )
    # without a tokenizer, text is the user message itself
    assert rendered.text == rendered.messages[-1].text


@pytest.mark.unit
def test_bad_input(corpus):
    with pytest.raises(ValueError, match="choose one of"):
        render_cic_prompt("summarisation", "q", corpus)
    with pytest.raises(ValueError, match=r"query must be a non-empty string, got '  '"):
        render_cic_prompt("qa", "  ", corpus)
    twins = [Document(content="a", meta={"passage_id": "PSG001"}), Document(content="b", meta={"passage_id": "PSG001"})]
    with pytest.raises(ValueError, match="repeat"):
        render_cic_prompt("qa", "q", twins)
    with pytest.raises(ValueError, match="no text"):
        render_cic_prompt("qa", "q", [Document(id="x", content=None)])


@pytest.mark.unit
def test_prompt_builder_component(corpus, question):
    builder = CorpusInContextPromptBuilder(task_type="fact_verification")
    data = component_to_dict(builder, "prompt_builder")
    assert data["init_parameters"]["task_type"] == "fact_verification"
    clone = component_from_dict(CorpusInContextPromptBuilder, data, "prompt_builder")
    assert component_to_dict(clone, "prompt_builder") == data
    result = clone.run(query=question, documents=corpus)
    assert result["passage_ids"] == ["PSG001", "PSG002", "PSG003", "PSG004"]
    content = result["prompt"][-1].text
    assert content.startswith("According to the following passages, please verify") and content.endswith("Judgement:")
    overridden = clone.run(query=question, documents=corpus, task_type="qa", query_aware=True)["prompt"][-1].text
    assert overridden.count(f"Question: {question}") == 2
    with pytest.raises(ValueError, match="choose one of"):
        CorpusInContextPromptBuilder(task_type="chat")


# RetrievalQA (arXiv 2402.16457), Figure 8, "Instruction prompt template for QA with retrieved documents", verbatim
RETRIEVALQA_FIGURE_8 = ('Please answer the question based on the provided context. Only include the answer in your '
                        'response and try to be concise. If you do not know the answer, just say "I don\'t know".')


@pytest.mark.parametrize("query_aware", [False, True])
def test_a_named_answer_instruction_quotes_the_paper_before_the_icr2_text(tokenizer, corpus, question, query_aware):
    plain = render_cic_prompt("qa", question, corpus, tokenizer=tokenizer, query_aware=query_aware)
    short = render_cic_prompt("qa", question, corpus, tokenizer=tokenizer, query_aware=query_aware,
                              answer_instruction="retrievalqa")
    instruction = ANSWER_INSTRUCTIONS["retrievalqa"].text
    assert RETRIEVALQA_FIGURE_8.endswith(" " + instruction)
    assert RETRIEVALQA_FIGURE_8.startswith("Please answer the question based on the provided context. "
                                           + ANSWER_INSTRUCTIONS["retrievalqa_concise"].text)
    # the ICR2 user message follows the instruction unchanged; without one it is ICR2's Table 8 as before
    assert short.messages[-1].text == f"{instruction}\n\n{plain.messages[-1].text}"
    assert plain.messages[-1].text.startswith("Please answer the following question given the following passages:\n")
    assert render_cic_prompt("qa", question, corpus, answer_instruction="none").messages[-1].text == \
        render_cic_prompt("qa", question, corpus).messages[-1].text
    # passage and query spans still index the templated text exactly
    for pid, document in zip(short.passage_ids, corpus, strict=True):
        start, end = short.passage_char_spans[pid]
        assert short.text[start:end] == format_passage(pid, document.meta.get("title", ""), document.content)
    assert all(short.text[s:e] == question for s, e in short.query_char_spans)
    assert len(short.query_char_spans) == (2 if query_aware else 1)


@pytest.mark.unit
def test_answer_instruction_bad_input(corpus):
    with pytest.raises(ValueError, match="Unknown answer_instruction 'short'; choose one of"):
        render_cic_prompt("qa", "q", corpus, answer_instruction="short")
    with pytest.raises(ValueError, match="is a QA instruction"):
        render_cic_prompt("fact_verification", "q", corpus, answer_instruction="retrievalqa")
    with pytest.raises(ValueError, match="choose one of"):
        CorpusInContextPromptBuilder(answer_instruction="as few words as possible")
    with pytest.raises(ValueError, match="is a QA instruction"):
        CorpusInContextPromptBuilder(task_type="dialogue", answer_instruction="retrievalqa")
    builder = CorpusInContextPromptBuilder(answer_instruction="retrievalqa")
    with pytest.raises(ValueError, match="is a QA instruction"):  # never dropped silently on a task override
        builder.run(query="q", documents=corpus, task_type="fact_verification")


@pytest.mark.unit
def test_prompt_builder_answer_instruction_round_trips(corpus, question):
    builder = CorpusInContextPromptBuilder(answer_instruction="retrievalqa_concise")
    data = component_to_dict(builder, "prompt")
    assert data["init_parameters"]["answer_instruction"] == "retrievalqa_concise"
    clone = component_from_dict(CorpusInContextPromptBuilder, data, "prompt")
    content = clone.run(query=question, documents=corpus)["prompt"][-1].text
    assert content.startswith("Only include the answer in your response and try to be concise.\n\n"
                              "Please answer the following question given the following passages:\n")
    assert content.endswith(f"Question: {question}\nAnswer:")
