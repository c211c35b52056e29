"""The private transformers attributes that attention taps use are checked once, with a clear message when they move.

No weights: a config is made from its class, and a moved attribute is simulated by hiding the real one for the test.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from transformers import LlamaConfig
from transformers.masking_utils import AttentionMaskInterface

from icr2_components.models import transformers_internals
from icr2_components.models.transformers_internals import (
    TransformersInternalsError,
    builds_mask_through_registry,
    check_internals,
    set_kernel_name,
)

pytestmark = pytest.mark.unit


@pytest.fixture
def unchecked(monkeypatch):
    """Forget the once-per-process check, so the test sees it run on what is installed now."""
    monkeypatch.setattr(transformers_internals, "_CHECKED", False)


def test_the_installed_transformers_has_both_internals(unchecked):
    check_internals()
    config = LlamaConfig()
    set_kernel_name(config, "sdpa")
    assert config._attn_implementation == "sdpa"
    # sdpa builds its mask through the registry; a name nobody registered does not
    assert builds_mask_through_registry("sdpa") is True
    assert builds_mask_through_registry("no-such-kernel") is False


def test_a_moved_mask_registry_is_named_with_the_installed_version(unchecked, monkeypatch):
    import transformers

    # a registry that keeps its implementations under another name
    monkeypatch.setattr(AttentionMaskInterface, "_global_mapping", None)
    with pytest.raises(TransformersInternalsError) as error:
        builds_mask_through_registry("sdpa")
    message = str(error.value)
    assert "AttentionMaskInterface._global_mapping" in message
    assert transformers.__version__ in message
    assert transformers_internals.TESTED_VERSIONS in message


def test_a_config_attribute_that_no_longer_steers_the_kernel_is_named(unchecked, monkeypatch):
    from transformers import PretrainedConfig

    # a transformers where the property reads something else: setting the private attribute changes nothing
    monkeypatch.setattr(PretrainedConfig, "_attn_implementation", property(lambda self: "sdpa", lambda self, v: None))
    with pytest.raises(TransformersInternalsError, match="_attn_implementation_internal"):
        set_kernel_name(LlamaConfig(), "eager")
