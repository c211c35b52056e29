"""Context-aware decoding rules (CAD, ACD, COIECD, and any a user adds), one registered class per module.

Every module of this package other than ``base`` and ``registry`` defines one rule and registers it when it is
imported; they are all imported here, so adding a rule to the package is adding one file. A rule defined
elsewhere registers itself the same way (``register_decoding_rule``) once its module is imported.
"""

import importlib
import pkgutil

from icr2_components.readers.decoding_rules.base import DecodingRule
from icr2_components.readers.decoding_rules.registry import UnknownDecodingRuleError, register_decoding_rule

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "registry"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "DecodingRule",
    "UnknownDecodingRuleError",
    "register_decoding_rule",
]
