"""The context-aware decoding rules (CAD, ACD, COIECD): pure functions on hand-made and random logits, and each
registered rule's class."""

import math
from pathlib import Path

import pytest
import torch

from icr2_components.readers.decoding_rules import DecodingRule, UnknownDecodingRuleError
from icr2_components.readers.decoding_rules.acd import acd_logits, acd_mixing_weight
from icr2_components.readers.decoding_rules.base import entropy
from icr2_components.readers.decoding_rules.cad import cad_logits
from icr2_components.readers.decoding_rules.coiecd import COIECDParameters, coiecd_constraint, coiecd_logits
from icr2_components.readers.decoding_rules.registry import decoding_rule, decoding_rule_class, decoding_rule_names


def _pair(seed=0, shape=(3, 50)):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


def package_rules() -> dict[str, tuple[str, str]]:
    """Every rule the package's own modules define, read from their source: name -> (module, class), one
    ``@register_decoding_rule("<name>")`` class each (the package docstring's rule)."""
    import ast
    import importlib.util

    folder = Path(importlib.util.find_spec("icr2_components.readers.decoding_rules").origin).parent
    found: dict[str, tuple[str, str]] = {}
    for source in sorted(folder.glob("*.py")):
        if source.stem in ("__init__", "base", "registry"):
            continue
        for node in ast.walk(ast.parse(source.read_text())):
            for decorator in getattr(node, "decorator_list", []):
                if (isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "register_decoding_rule"
                        and isinstance(decorator.args[0], ast.Constant)):
                    assert decorator.args[0].value not in found, f"{decorator.args[0].value} registered twice"
                    found[decorator.args[0].value] = (f"icr2_components.readers.decoding_rules.{source.stem}",
                                                      node.name)
    return found


@pytest.mark.unit
def test_the_registry_holds_exactly_the_rules_the_package_defines():
    defined = package_rules()
    assert set(defined) == {"cad", "acd", "coiecd"}  # the three papers' rules, one module each
    # rules registered by tests of user-defined rules live outside the package; the package's own are exactly these
    registered = {name: decoding_rule_class(name) for name in decoding_rule_names()}
    own = {name: (cls.__module__, cls.__name__) for name, cls in registered.items()
           if cls.__module__.startswith("icr2_components.")}
    assert own == defined
    for name, rule_class in registered.items():
        assert rule_class.name == name and issubclass(rule_class, DecodingRule)
        assert decoding_rule(name).name == name  # each builds with its defaults


@pytest.mark.parametrize("technique", decoding_rule_names())
def test_weight_zero_returns_the_context_logits_bit_for_bit(technique):
    z_c, z_m = _pair()
    out, _ = decoding_rule(technique).combine(z_c, z_m, 0.0)
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


# COIECD on hand-built steps. Token 3 sits far in the tail of both distributions: it is the least likely token under
# the context, so it always violates the upper bound (lambda * min p_c) and is scored by the conflict branch.
DECISIVE = torch.tensor([4.0, 1.0, 0.0, -20.0]), torch.tensor([0.0, 3.0, 0.0, -20.0])
CONTESTED = torch.tensor([1.9, 2.0, 0.0, -20.0]), torch.tensor([0.0, 3.0, 0.0, -20.0])


def _log_probs(context, memory):
    return torch.log_softmax(context, dim=-1), torch.log_softmax(memory, dim=-1)


def test_coiecd_a_decisive_context_is_no_conflict_and_scores_memory_moved_by_alpha():
    # the context's top token stands alone (no other within a factor lambda = 4): no conflict at the head, even
    # though memory prefers token 1; the non-conflict branch lp_m + alpha * (lp_c - lp_m) scores tokens 0-2
    context, memory = DECISIVE
    lp_c, lp_m = _log_probs(context, memory)
    out, conflict = coiecd_logits(context, memory, alpha=1.0, bound_ratio=4.0)
    assert conflict.tolist() == [False, False, False, True]
    assert torch.allclose(out[:3], lp_c[:3], atol=1e-6) and int(out.argmax()) == 0  # alpha 1: plain decoding here
    assert torch.allclose(out[3], lp_c[3] + (lp_c[3] - lp_m[3]), atol=1e-5)  # the tail token: conflict branch
    half, _ = coiecd_logits(context, memory, alpha=0.5, bound_ratio=4.0)
    assert torch.allclose(half[:3], lp_m[:3] + 0.5 * (lp_c[:3] - lp_m[:3]), atol=1e-6)
    none, _ = coiecd_logits(context, memory, alpha=0.0, bound_ratio=4.0)
    assert torch.allclose(none[:3], lp_m[:3], atol=1e-6) and int(none.argmax()) == 1  # alpha 0: memory's token


def test_coiecd_a_contested_step_is_a_conflict_resolved_toward_the_context():
    # two tokens within a factor 4 of the context's top: both violate the lower bound -> conflict, scored with
    # CAD's contrast lp_c + alpha * (lp_c - lp_m), which removes memory's push toward token 1
    context, memory = CONTESTED
    lp_c, lp_m = _log_probs(context, memory)
    assert int(context.argmax()) == 1  # plain decoding follows memory's favourite
    out, conflict = coiecd_logits(context, memory, alpha=1.0, bound_ratio=4.0)
    assert conflict.tolist() == [True, True, False, True]
    assert torch.allclose(out[conflict], (2 * lp_c - lp_m)[conflict], atol=1e-5)
    assert torch.allclose(out[~conflict], lp_c[~conflict], atol=1e-6)  # lp_m + 1 * (lp_c - lp_m)
    assert int(out.argmax()) == 0
    rule = decoding_rule("coiecd", COIECDParameters(alpha=1.0, bound_ratio=4.0))
    logits, stats = rule.combine(context, memory, 1.0)
    assert torch.equal(logits, out) and stats == {"conflict": 1.0}  # the greedy token was a conflicting one
    assert rule.combine(*DECISIVE, 1.0)[1] == {"conflict": 0.0}
    assert decoding_rule("coiecd").parameters == COIECDParameters(alpha=1.0, bound_ratio=4.0)  # the authors' code


def test_coiecd_bound_ratio_sets_how_many_tokens_conflict():
    context, memory = CONTESTED
    lp_c, _ = _log_probs(context, memory)
    assert coiecd_constraint(context, memory, 1.0).tolist() == [False] * 4  # lambda 1: bounds at the extremes
    assert coiecd_constraint(context, memory, 4.0).tolist() == [True, True, False, True]
    assert coiecd_constraint(context, memory, 10.0).tolist() == [True] * 4  # token 2 is within e^2 < 10 of the top
    out, _ = coiecd_logits(context, memory, alpha=1.0, bound_ratio=1.0)
    assert torch.allclose(out, lp_c, atol=1e-6) and int(out.argmax()) == 1  # no conflict, alpha 1: plain decoding


def test_coiecd_constraint_is_the_ratio_test_on_the_contextual_distribution():
    # the entropy shift is one constant per step, so the normalised constraint reduces to p_c against its extremes
    for seed in range(4):
        context, memory = _pair(seed, shape=(5, 200))
        context = context * 3  # sharper distributions: lone and contested heads both occur
        for ratio in (1.5, 4.0, 16.0):
            lp_c = torch.log_softmax(context, dim=-1)
            head = lp_c > lp_c.amax(-1, keepdim=True) - math.log(ratio)
            head = head & (head.sum(-1, keepdim=True) > 1)
            tail = lp_c < lp_c.amin(-1, keepdim=True) + math.log(ratio)
            conflict = coiecd_constraint(context, memory, ratio)
            assert torch.equal(conflict, head | tail)
            assert torch.equal(conflict, coiecd_constraint(context, torch.zeros_like(memory), ratio))


def test_coiecd_weight_interpolates_from_plain_decoding_to_the_method():
    context, memory = _pair(3)
    lp_c = torch.log_softmax(context, dim=-1)
    full, conflict = coiecd_logits(context, memory, weight=1.0, alpha=1.5, bound_ratio=2.0)
    half, same = coiecd_logits(context, memory, weight=0.5, alpha=1.5, bound_ratio=2.0)
    assert torch.equal(conflict, same) and torch.allclose(half, (lp_c + full) / 2, atol=1e-5)
    zero, _ = coiecd_logits(context, memory, weight=0.0, alpha=1.5, bound_ratio=2.0)
    assert zero is context


@pytest.mark.unit
def test_coiecd_refuses_settings_outside_the_method():
    context, memory = CONTESTED
    with pytest.raises(ValueError, match="lambda"):
        coiecd_logits(context, memory, bound_ratio=0.5)
    with pytest.raises(ValueError, match="lambda"):
        coiecd_logits(context, memory, bound_ratio=float("nan"))
    with pytest.raises(ValueError, match=">= 0"):
        coiecd_logits(context, memory, alpha=-1.0)
    with pytest.raises(ValueError, match=">= 0"):
        coiecd_logits(context, memory, weight=-1.0)


@pytest.mark.unit
def test_rules_refuse_bad_input():
    z_c, z_m = _pair()
    with pytest.raises(ValueError, match="one shape"):
        cad_logits(z_c, z_m[:, :10], 1.0)
    with pytest.raises(ValueError, match=">= 0"):
        acd_logits(z_c, z_m, -1.0)
    with pytest.raises(
        UnknownDecodingRuleError, match=r"Unknown decoding rule 'dola'; choose one of \['acd', 'cad', 'coiecd'"
    ):
        decoding_rule("dola")
    with pytest.raises(ValueError, match="lambda"):
        COIECDParameters(bound_ratio=0.5)
    with pytest.raises(TypeError, match="COIECDParameters"):
        decoding_rule("cad", COIECDParameters())
