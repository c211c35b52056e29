"""The two private corners of transformers that attention access reaches into, behind one checked door.

Attention taps (``models/attention.py``) switch a model's attention kernel to a pass-through that sees each call.
transformers offers no public way to do two things that needs:

- set a config's kernel name without the ``_attn_implementation`` property also rewriting every sub-config (a vision
  tower keeps its own kernel): the private attribute ``PretrainedConfig._attn_implementation_internal``;
- ask whether an implementation builds its mask through the mask registry (so the tapped kernel gets exactly the mask
  the untapped one gets): the private class attribute ``AttentionMaskInterface._global_mapping``.

Private attributes move without a deprecation cycle, so both are reached only here, and :func:`check_internals`
verifies them once per process, failing with one message naming the installed transformers version, the attribute
that moved and the versions this was tested with, instead of an ``AttributeError`` deep inside a generation.

Usage:
    >>> from transformers import LlamaConfig
    >>> from icr2_components.models.transformers_internals import set_kernel_name
    >>> config = LlamaConfig()
    >>> set_kernel_name(config, "sdpa")
    >>> config._attn_implementation
    'sdpa'
"""

from __future__ import annotations

import threading
from typing import Any

#: the transformers version these internals were last checked against (``tests/test_transformers_internals.py``)
TESTED_VERSIONS = "5.25"

_CHECKED = False
_LOCK = threading.Lock()


class TransformersInternalsError(RuntimeError):
    """A private transformers attribute that attention access relies on has moved in the installed version."""


def _moved(what: str, detail: str) -> TransformersInternalsError:
    import transformers

    return TransformersInternalsError(
        f"transformers {transformers.__version__}: {what} has moved ({detail}); attention taps (RAP, head suppression, "
        f"PH3 probing) were tested with transformers {TESTED_VERSIONS}. Install a tested version "
        f"(pip install 'transformers=={TESTED_VERSIONS}.*') or report the new version."
    )


def check_internals() -> None:
    """Verify, once per process, that both private attributes are where attention access expects them.

    :raises TransformersInternalsError: naming the attribute and the installed version, when one has moved.
    """
    global _CHECKED
    if _CHECKED:
        return
    with _LOCK:
        if _CHECKED:
            return
        from transformers import PretrainedConfig
        from transformers.masking_utils import AttentionMaskInterface

        mapping = getattr(AttentionMaskInterface, "_global_mapping", None)
        if not isinstance(mapping, dict):
            raise _moved("AttentionMaskInterface._global_mapping", f"found {type(mapping).__name__}, expected a dict")
        probe = PretrainedConfig()
        if not hasattr(probe, "_attn_implementation_internal"):
            raise _moved("PretrainedConfig._attn_implementation_internal", "a new config has no such attribute")
        probe._attn_implementation_internal = "eager"
        if getattr(probe, "_attn_implementation", None) != "eager":
            raise _moved(
                "PretrainedConfig._attn_implementation_internal",
                "setting it no longer changes the config's _attn_implementation",
            )
        _CHECKED = True


def set_kernel_name(config: Any, implementation: str) -> None:
    """Point ``config`` (and only it, not its sub-configs) at the attention kernel named ``implementation``.

    :raises TransformersInternalsError: when the private attribute has moved.
    """
    check_internals()
    config._attn_implementation_internal = implementation


def builds_mask_through_registry(implementation: str) -> bool:
    """Whether transformers builds the attention mask of ``implementation`` through its mask registry.

    :raises TransformersInternalsError: when the registry's private mapping has moved.
    """
    check_internals()
    from transformers.masking_utils import AttentionMaskInterface

    return implementation in AttentionMaskInterface._global_mapping
