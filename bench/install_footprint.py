"""What installing the library costs: the core against ``haystack-ai`` alone, and the ``local`` extra.

Builds the wheel from a clean copy of the package, then creates fresh virtual environments in the same run for
``haystack-ai`` alone, the core wheel (no extras) and the wheel with ``[local]``, each installed from PyPI with pip's
cache off (what a new user downloads). For each it prints the size on disk the install added to an empty virtual
environment, the number of distributions it added, the install's wall time, and the cold import time of
``haystack`` and of each subpackage of the library: a fresh interpreter per import, the import itself timed inside
it, the median of ``--repeats``, wall and CPU time (the CPU time is what a loaded machine changes least), and, for the
library's modules, the ratio of the whole import to ``import haystack`` within one interpreter (Haystack imported
first, then what the module adds: both parts under the same conditions). Ratios:
core size / ``haystack-ai`` size (target at most 1.5) and ``import icr2_components.reorderers`` / ``import
haystack`` in the core environment (target at most 1.2).

    python bench/install_footprint.py                      # all three environments (downloads torch: minutes)
    python bench/install_footprint.py --envs haystack-ai,core # without the local extra

Results: a table on stdout and ``bench/results/install_footprint.json``. The environments live in a temporary
folder removed at the end (``--keep`` keeps it). Timings depend on the network and the machine's load: the JSON
records both (``uptime``'s load averages before and after).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "install_footprint.json"
SIZE_TARGET = 1.5
IMPORT_TARGET = 1.2
# what the interpreter in each environment imports (the time of the import statement alone, in a fresh process);
# telemetry off so that no environment opens a connection
# the CPU time of the import too: on a loaded machine the wall time mostly measures the other processes
IMPORT_SCRIPT = ("import time, sys; t, c = time.perf_counter(), time.process_time(); import {module}; "
                 "print(time.perf_counter() - t, time.process_time() - c, 'torch' in sys.modules)")
# the same import split in one interpreter: Haystack first, then what the module adds on top of it (every module of
# the library imports Haystack first), so that both parts share one process's conditions
SPLIT_SCRIPT = ("import time; t = time.perf_counter(); import haystack; h = time.perf_counter(); import {module}; "
                "print(h - t, time.perf_counter() - h)")
LIST_SUBPACKAGES = ("import icr2_components, pkgutil; "
                    "print(' '.join(m.name for m in pkgutil.iter_modules(icr2_components.__path__, 'icr2_components.') "
                    "if m.ispkg))")


def disk_usage(path: Path) -> int:
    """Bytes on disk (allocated blocks) under ``path``."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    return result


def build_wheel(work: Path) -> Path:
    """The wheel of a clean copy of the package (the checkout's build/ folder is neither read nor written)."""
    source = work / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "icr2_components", source / "icr2_components", ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    out = work / "wheel"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
         str(source)])
    return next(out.glob("icr2_components-*.whl"))


def distributions(python: Path) -> set[str]:
    listed = json.loads(run([str(python), "-m", "pip", "list", "--format", "json"]).stdout)
    return {d["name"].lower() for d in listed}


def import_time(python: Path, module: str, repeats: int, env: dict[str, str]) -> dict:
    """Median cold import time of ``module`` (a fresh interpreter per repeat), or why it cannot be imported."""
    times, cpu_times, torch_loaded = [], [], False
    for _ in range(repeats):
        result = subprocess.run([str(python), "-c", IMPORT_SCRIPT.format(module=module)], capture_output=True,
                                text=True, env=env, cwd=tempfile.gettempdir())
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["?"])[-1]
            return {"error": last}
        seconds, cpu_seconds, torch = result.stdout.split()
        times.append(float(seconds))
        cpu_times.append(float(cpu_seconds))
        torch_loaded = torch_loaded or torch == "True"
    entry = {"median_s": statistics.median(times), "runs_s": times, "median_cpu_s": statistics.median(cpu_times),
             "cpu_runs_s": cpu_times, "torch_imported": torch_loaded}
    if module.startswith("icr2_components"):
        ratios = []
        for _ in range(repeats):
            result = subprocess.run([str(python), "-c", SPLIT_SCRIPT.format(module=module)], capture_output=True,
                                    text=True, env=env, cwd=tempfile.gettempdir(), check=True)
            haystack_s, added_s = (float(x) for x in result.stdout.split())
            ratios.append((haystack_s + added_s) / haystack_s)
        entry["over_haystack_same_process"] = statistics.median(ratios)
        entry["over_haystack_same_process_runs"] = ratios
    return entry


def install_environment(work: Path, name: str, requirement: list[str], repeats: int, env: dict[str, str],
                        only: set[str] | None = None) -> dict:
    folder = work / name
    run([sys.executable, "-m", "venv", str(folder)])
    python = folder / "bin" / "python"
    empty_size, empty_dists = disk_usage(folder), distributions(python)
    print(f"[{name}] pip install {' '.join(requirement)} ...", flush=True)
    start = time.perf_counter()
    run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir", "--disable-pip-version-check", *requirement])
    install_s = time.perf_counter() - start
    added = sorted(distributions(python) - empty_dists)
    modules = ["haystack"]
    if name != "haystack-ai":
        modules += ["icr2_components", *run([str(python), "-c", LIST_SUBPACKAGES], env=env,
                                            cwd=tempfile.gettempdir()).stdout.split()]
        if only:
            modules = [m for m in modules if m == "haystack" or m.removeprefix("icr2_components.") in only]
    imports = {}
    for module in modules:
        imports[module] = import_time(python, module, repeats, env)
        shown = imports[module].get("median_s")
        print(f"[{name}] import {module}: " + (f"{shown:.3f} s" if shown is not None else imports[module]["error"]),
              flush=True)
    return {"requirement": requirement, "size_bytes": disk_usage(folder) - empty_size, "distributions": len(added),
            "distribution_names": added, "install_s": install_s, "imports": imports}


def load_average() -> list[float]:
    return list(os.getloadavg())


def table(results: dict) -> str:
    names = list(results["environments"])
    rows = [("", *names),
            ("size on disk (MB)", *(f"{results['environments'][n]['size_bytes'] / 1e6:.0f}" for n in names)),
            ("distributions", *(str(results["environments"][n]["distributions"]) for n in names)),
            ("install time (s)", *(f"{results['environments'][n]['install_s']:.0f}" for n in names))]
    modules = sorted({m for n in names for m in results["environments"][n]["imports"]},
                     key=lambda m: (m != "haystack", m != "icr2_components", m))
    for module in modules:
        cells = []
        for n in names:
            entry = results["environments"][n]["imports"].get(module)
            if entry is None:
                cells.append("")
            elif "error" in entry:
                cells.append("needs an extra" if "extra" in entry["error"] or "No module" in entry["error"]
                             else "fails")
            else:
                cells.append(f"{entry['median_s']:.2f} / {entry['median_cpu_s']:.2f}"
                             + (" (torch)" if entry["torch_imported"] else ""))
        rows.append((f"import {module} (s wall / CPU)", *cells))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="haystack-ai,core,local",
                        help="which environments, comma-separated (haystack-ai, core, local)")
    parser.add_argument("--repeats", type=int, default=5, help="fresh interpreters per import (median)")
    parser.add_argument("--subpackages", default="",
                        help="time only these subpackages, comma-separated (default: every one), e.g. reorderers")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder with the environments")
    args = parser.parse_args(argv)
    wanted = [e.strip() for e in args.envs.split(",") if e.strip()]
    unknown = set(wanted) - {"haystack-ai", "core", "local"}
    if unknown or not wanted:
        parser.error(f"--envs: unknown {sorted(unknown)}; choose from haystack-ai, core, local")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    work = Path(tempfile.mkdtemp(prefix="icr2-footprint-"))
    results: dict = {"machine": {"platform": platform.platform(), "python": platform.python_version(),
                                 "cpus": os.cpu_count(), "load_before": load_average()},
                     "environments": {}}
    try:
        wheel = build_wheel(work)
        haystack_pin = next(r for r in _core_requirements() if r.startswith("haystack-ai"))
        requirements = {"haystack-ai": [haystack_pin], "core": [str(wheel)], "local": [f"{wheel}[local]"]}
        for name in wanted:
            only = {m.strip() for m in args.subpackages.split(",") if m.strip()} or None
            results["environments"][name] = install_environment(work, name, requirements[name], args.repeats, env,
                                                                only)
    finally:
        if args.keep:
            print(f"environments kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    results["machine"]["load_after"] = load_average()
    environments = results["environments"]
    ratios = {}
    if "haystack-ai" in environments and "core" in environments:
        ratios["core_size_over_haystack_ai"] = environments["core"]["size_bytes"] / environments["haystack-ai"][
            "size_bytes"]
    if "core" in environments:
        core = environments["core"]["imports"]
        if "median_s" in core.get("icr2_components.reorderers", {}):
            ratios["reorderers_import_over_haystack_import"] = (core["icr2_components.reorderers"]["median_s"]
                                                                / core["haystack"]["median_s"])
            ratios["reorderers_import_over_haystack_import_cpu"] = (
                core["icr2_components.reorderers"]["median_cpu_s"] / core["haystack"]["median_cpu_s"])
            ratios["reorderers_import_over_haystack_import_same_process"] = (
                core["icr2_components.reorderers"]["over_haystack_same_process"])
    results["ratios"] = ratios
    results["targets"] = {"core_size_over_haystack_ai": SIZE_TARGET,
                          "reorderers_import_over_haystack_import": IMPORT_TARGET,
                          "reorderers_import_over_haystack_import_cpu": IMPORT_TARGET,
                          "reorderers_import_over_haystack_import_same_process": IMPORT_TARGET}
    print()
    print(table(results))
    for key, value in ratios.items():
        target = results["targets"][key]
        print(f"{key}: {value:.2f} (target at most {target}: {'met' if value <= target else 'missed'})")
    print(f"load averages before {results['machine']['load_before']}, after {results['machine']['load_after']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


def _core_requirements() -> list[str]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


if __name__ == "__main__":
    sys.exit(main())
