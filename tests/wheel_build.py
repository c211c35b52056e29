"""The wheel of a clean copy of the package, for the tests that install it as a user would.

Built from a copy rather than the checkout: other test workers import the package while the build runs, and the
``.pyc`` files they write into ``__pycache__`` (temporary names, renamed in place) would otherwise race setuptools'
package-data globs. The checkout's own ``build/`` folder is not touched either.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_wheel(work: Path) -> Path:
    """Build the wheel of a clean copy of this checkout's package under ``work``; its path.

    :raises AssertionError: if pip fails, with pip's own output.
    """
    source = work / "source"
    shutil.copytree(ROOT / "icr2_components", source / "icr2_components",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(work / "wheel"), str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    [wheel] = (work / "wheel").glob("icr2_components-*.whl")
    return wheel
