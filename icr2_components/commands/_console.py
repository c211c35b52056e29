"""The console the commands print tables on.

Piped or captured output (CI logs, ``tee``, a notebook) has no terminal width, and rich then squeezes tables
into 80 columns and truncates pipeline names; there we print 160 columns wide instead.
"""

from __future__ import annotations

import sys


def make_console():
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160)
