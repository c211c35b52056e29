"""The SFT loss that projects only target positions onto the vocabulary (training/target_logits.py) is the loss
transformers computes over every position: same value and same gradients, on real SmolLM2 and two real
corpus-in-context examples of different lengths (right-padded into one batch). And the retrieve-then-answer
reply parser scores the answer, never the copied passage."""

import pytest
import torch


@pytest.fixture(scope="module")
def batch_and_model(tmp_path_factory):
    from icr2_components.training.dataset import load_sft_examples
    from icr2_components.training.examples import pad_batch
    from icr2_components.training.model_loading import load_trainable
    from icr2_components.training.sample_data import build_sample_benchmark

    path = tmp_path_factory.mktemp("target-logits") / "train.jsonl"
    build_sample_benchmark(path, limit=2, budget_passages=3)
    model, tokenizer = load_trainable("smollm2-135m-instruct")
    examples = load_sft_examples(path, tokenizer, "da", max_length=2048).examples
    assert len({len(e.input_ids) for e in examples}) == 2, "the two examples should differ in length (padding)"
    return pad_batch([e.as_features() for e in examples], tokenizer.pad_token_id), model


def _loss_and_grad(model, loss_fn):
    model.zero_grad(set_to_none=True)
    loss = loss_fn()
    loss.backward()
    grad = model.model.layers[3].self_attn.q_proj.weight.grad.clone()
    return float(loss.detach()), grad


def test_target_only_loss_equals_the_full_loss_with_the_same_gradients(batch_and_model):
    from icr2_components.training.target_logits import target_only_loss, target_positions

    batch, model = batch_and_model
    count = int((batch["labels"][:, 1:] != -100).sum())
    full, full_grad = _loss_and_grad(model, lambda: model(**batch).loss)
    ours, our_grad = _loss_and_grad(model, lambda: target_only_loss(model, batch))
    kept = target_positions(batch["labels"])
    assert len(kept) < batch["input_ids"].shape[1] / 10, "only a few positions are projected"
    assert ours == pytest.approx(full, rel=1e-5)
    assert torch.allclose(our_grad, full_grad, rtol=1e-3, atol=1e-7)
    # with Trainer's token count of the accumulated batch, the sum is divided by that count instead
    doubled = float(target_only_loss(model, batch, num_items_in_batch=2 * count))
    assert doubled == pytest.approx(full / 2, rel=1e-5)


@pytest.mark.unit
def test_reply_parser_scores_the_answer_not_the_copied_passage():
    from haystack import Document
    from haystack.dataclasses import ChatMessage

    from icr2_components.readers import RetrievalReplyParser

    docs = [Document(content="Paris is the capital of France.", meta={"passage_id": "PSG001"}),
            Document(content="Berlin is the capital of Germany.", meta={"passage_id": "PSG002"})]
    parser = RetrievalReplyParser()
    rta = ChatMessage.from_assistant("<RETRIEVAL> The relevant passage for the question is, “Berlin is the capital of "
                                     "Germany.” </RETRIEVAL> The correct answer is Berlin.")
    out = parser.run(replies=[rta], documents=docs)
    assert out["replies"][0].text == "Berlin"
    assert [d.meta["passage_id"] for d in out["retrieved_documents"]] == ["PSG002"]
    cci = ChatMessage.from_assistant("<RETRIEVAL> The relevant passage ID for this question is PSG001. </RETRIEVAL> "
                                     "The correct answer is Paris.")
    assert parser.run(replies=[cci], documents=docs)["replies"][0].meta["retrieved_ids"] == ["PSG001"]
    cut = ChatMessage.from_assistant("<RETRIEVAL> The relevant passage for the question is, “Paris is the capital")
    out = parser.run(replies=[cut], documents=docs)
    assert out["replies"][0].text == "" and out["unfinished"] == 1  # never scored on the copy
    assert parser.run(replies=[ChatMessage.from_assistant("The answer is Paris.")])["replies"][0].text == "Paris"
    with pytest.raises(ValueError, match="match_threshold"):
        RetrievalReplyParser(match_threshold=0)
