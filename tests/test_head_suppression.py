"""PH3 head suppression through the attention access, on the real SmolLM2-135M-Instruct.

Zero heads is the identity; suppressing head (l, h) zeroes exactly that head's output at the o_proj input of
layer l (checked with a hook on o_proj itself, not through our own capture), leaves every earlier layer bit for
bit and changes later ones; out-of-range heads are refused.
"""

from pathlib import Path

import pytest
import torch
from haystack.dataclasses import ChatMessage

from icr2_components.models.attention import AttentionAccessError
from icr2_components.models.head_suppression import check_heads, head_outputs, suppress_heads

ROOT = Path(__file__).resolve().parents[1]
LAYER, HEAD = 12, 4


@pytest.fixture(scope="module")
def ids(smollm2):
    _, tokenizer = smollm2
    return tokenizer("The Eiffel Tower stands in the city of", return_tensors="pt")["input_ids"]


def _o_proj_inputs(model, ids, heads=None):
    """Inputs of every layer's o_proj, (layers, T, heads * head_dim), optionally under suppression."""
    captured = {}
    hooks = [layer.self_attn.o_proj.register_forward_pre_hook(
        lambda _m, args, i=i: captured.__setitem__(i, args[0][0].detach().clone()))
        for i, layer in enumerate(model.model.layers)]
    try:
        with torch.inference_mode():
            if heads is None:
                logits = model(input_ids=ids, use_cache=False).logits
            else:
                with suppress_heads(model, heads):
                    logits = model(input_ids=ids, use_cache=False).logits
    finally:
        for hook in hooks:
            hook.remove()
    return torch.stack([captured[i] for i in sorted(captured)]), logits


def test_zero_heads_is_the_identity(smollm2, ids):
    model, _ = smollm2
    plain_inputs, plain_logits = _o_proj_inputs(model, ids)
    tapped_inputs, tapped_logits = _o_proj_inputs(model, ids, heads=[])
    assert torch.equal(plain_logits, tapped_logits)
    assert torch.equal(plain_inputs, tapped_inputs)


def test_suppressing_a_head_changes_exactly_that_heads_output(smollm2, ids):
    model, _ = smollm2
    head_dim = model.config.head_dim
    plain, plain_logits = _o_proj_inputs(model, ids)
    suppressed, logits = _o_proj_inputs(model, ids, heads=[(LAYER, HEAD)])
    view = lambda x: x.view(x.shape[0], x.shape[1], -1, head_dim)  # noqa: E731  (layers, T, heads, d)
    plain, suppressed = view(plain), view(suppressed)
    assert torch.equal(plain[:LAYER], suppressed[:LAYER])  # earlier layers untouched
    assert plain[LAYER, :, HEAD].abs().sum() > 0
    assert torch.equal(suppressed[LAYER, :, HEAD], torch.zeros_like(suppressed[LAYER, :, HEAD]))
    others = [h for h in range(plain.shape[2]) if h != HEAD]
    assert torch.equal(plain[LAYER][:, others], suppressed[LAYER][:, others])  # the layer's other heads: same
    assert not torch.equal(plain[LAYER + 1:], suppressed[LAYER + 1:])  # the change flows downstream
    assert not torch.equal(plain_logits, logits)
    # our own capture (the kernel output, before o_proj) agrees with the o_proj hook
    outputs, _ = head_outputs(model, ids, positions=[-1], heads=[(LAYER, HEAD)])
    assert torch.allclose(outputs[LAYER, 0, 0], suppressed[LAYER, -1])


def test_suppression_ends_with_the_context(smollm2, ids):
    model, _ = smollm2
    before, _ = _o_proj_inputs(model, ids)
    with suppress_heads(model, [(LAYER, HEAD)]):
        pass
    after, _ = _o_proj_inputs(model, ids)
    assert torch.equal(before, after)


def test_head_indices_out_of_range_are_refused(smollm2):
    model, _ = smollm2
    for bad in ([(30, 0)], [(0, 9)], [(-1, 0)], [(0, 1, 2)]):
        with pytest.raises(AttentionAccessError, match=r"out of range|pair"):
            check_heads(model, bad)
    with pytest.raises(AttentionAccessError, match="out of range"), suppress_heads(model, [(3, 42)]):
        pass
    assert check_heads(model, [(29, 8), (0, 0), (0, 0)]) == [(0, 0), (29, 8)]


def test_ph3_reader_with_zero_heads_is_the_plain_reader_and_refuses_bad_heads(smollm2):
    from haystack.core.serialization import component_from_dict, component_to_dict

    from icr2_components.readers import HeadSuppressionReader, LocalChatReader

    messages = [ChatMessage.from_user("Context: The Eiffel Tower is in Rome.\nQuestion: Where is the Eiffel Tower?")]
    plain = LocalChatReader(max_new_tokens=4, dtype="float32", device="cpu").run(messages=messages)["replies"][0].text
    reader = HeadSuppressionReader(artifact=str(ROOT / "bench/results/ph3_heads_smollm2.json"), num_heads=4,
                                   max_new_tokens=4, dtype="float32", device="cpu")
    zero = reader.run(messages=messages, num_heads=0)["replies"][0]
    assert zero.text == plain and zero.meta["suppressed_heads"] == []
    assert len(reader.chosen_heads()) == 4
    data = component_to_dict(reader, "reader")
    assert component_to_dict(component_from_dict(HeadSuppressionReader, data, "reader"), "reader") == data
    kept = data["init_parameters"]  # the non-default values survive the default serialisation
    assert kept["artifact"].endswith("ph3_heads_smollm2.json") and (kept["max_new_tokens"], kept["dtype"]) == (
        4,
        "float32",
    )
    bad = HeadSuppressionReader(heads=[[0, 9]], max_new_tokens=4, dtype="float32", device="cpu")
    with pytest.raises(AttentionAccessError, match="out of range"):
        bad.run(messages=messages)
    with pytest.raises(ValueError, match="artifact"):
        HeadSuppressionReader(num_heads=2)
    with pytest.raises(ValueError, match="direction"):
        HeadSuppressionReader(heads=[[0, 0]], direction="both")
