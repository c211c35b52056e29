"""The built-in gate methods, one registered :class:`~icr2_components.gates.gate_decider.GateDecider` a module.

Importing this package imports every module in it, which registers its decider: a new method is one new file.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
