"""The context-aware decoding rules (CAD, ACD, COIECD) as pure functions on hand-made and random logits."""

import pytest
import torch

from icr2_components.readers.context_aware_decoding import (
    acd_logits,
    acd_mixing_weight,
    apply_technique,
    cad_logits,
    coiecd_logits,
    entropy,
)


def _pair(seed=0, shape=(3, 50)):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


@pytest.mark.parametrize("technique", ["cad", "acd", "coiecd"])
def test_weight_zero_returns_the_context_logits_bit_for_bit(technique):
    z_c, z_m = _pair()
    out, _ = apply_technique(technique, z_c, z_m, 0.0)
    assert torch.equal(out, z_c)


def test_cad_formula():
    z_c, z_m = _pair(1)
    assert torch.allclose(cad_logits(z_c, z_m, 0.5), 1.5 * z_c - 0.5 * z_m)


def test_cad_promotes_the_token_the_context_raised():
    z_m = torch.tensor([2.0, 1.9, 0.0])
    z_c = torch.tensor([2.0, 1.95, 0.0])  # the context raised token 1 a little; plain decoding still picks 0
    assert int(z_c.argmax()) == 0
    assert int(cad_logits(z_c, z_m, 2.0).argmax()) == 1  # 3 * z_c - 2 * z_m = [2, 2.05, 0]


def test_entropy_of_uniform_and_one_hot():
    assert entropy(torch.zeros(8)).item() == pytest.approx(torch.log(torch.tensor(8.0)).item(), abs=1e-6)
    assert entropy(torch.tensor([100.0, 0.0, 0.0])).item() == pytest.approx(0.0, abs=1e-6)


def test_acd_weight_follows_the_entropies():
    confident = torch.tensor([10.0, 0.0, 0.0, 0.0])
    flat = torch.zeros(4)
    # a confident context and an unsure memory: the mix goes (almost) all to the context
    assert acd_mixing_weight(confident, flat).item() > 0.95
    # an unsure (irrelevant) context and a confident memory: the mix stays with memory
    assert acd_mixing_weight(flat, confident).item() < 0.05
    mixed, w_t = acd_logits(flat, confident, 1.0)
    assert int(mixed.argmax()) == 0 and torch.allclose(mixed, confident + w_t * (flat - confident))


def test_acd_weight_interpolates_to_the_paper_rule():
    z_c, z_m = _pair(2)
    full, w_t = acd_logits(z_c, z_m, 1.0)
    half, _ = acd_logits(z_c, z_m, 0.5)
    assert torch.allclose(full, z_m + w_t.unsqueeze(-1) * (z_c - z_m), atol=1e-6)
    assert torch.allclose(half, (z_c + full) / 2, atol=1e-6)


def test_coiecd_leaves_agreeing_steps_alone_and_resolves_conflicts():
    agree_c, agree_m = torch.tensor([3.0, 1.0, 0.0]), torch.tensor([2.0, 1.5, 0.0])
    out, conflict, _ = coiecd_logits(agree_c, agree_m, alpha=1.0)
    assert not conflict.item() and torch.equal(out, agree_c)
    # the context is sure of token 1, memory unsure but leaning 0: informative conflict -> toward the context
    context, memory = torch.tensor([0.0, 8.0, 0.0]), torch.tensor([0.5, 0.0, 0.0])
    out, conflict, toward = coiecd_logits(context, memory, alpha=1.0, threshold=0.5)
    assert conflict.item() and toward.item() and int(out.argmax()) == 1
    # the context is unsure (irrelevant), memory sure of token 0: conflict resolved toward memory
    context, memory = torch.tensor([0.0, 0.1, 0.0]), torch.tensor([8.0, 0.0, 0.0])
    out, conflict, toward = coiecd_logits(context, memory, alpha=1.0, threshold=0.5)
    assert conflict.item() and not toward.item() and int(out.argmax()) == 0


def test_rules_refuse_bad_input():
    z_c, z_m = _pair()
    with pytest.raises(ValueError, match="one shape"):
        cad_logits(z_c, z_m[:, :10], 1.0)
    with pytest.raises(ValueError, match=">= 0"):
        acd_logits(z_c, z_m, -1.0)
    with pytest.raises(ValueError, match="Unknown decoding technique"):
        apply_technique("dola", z_c, z_m, 1.0)
