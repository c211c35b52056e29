"""The scale bench's report (``bench/scale.py``): fits of each cost against size and their projection, the ratios
to the run's smallest size, and the tables (``scale.md``) and figure (``scale.png``) written from the payload.

**Baseline and projection.** Every size is compared with the smallest size measured in the same run (passages/s,
disk per passage, latency ratios), so the ratios show how cost grows. Each cost is then fitted against size and
projected to 36M passages (full KILT): disk, RSS and indexing time by a least-squares line ``a + b * n``,
latency by a power law ``c * n^k`` (a line in log-log); the fits, their points and the projections are printed
and written. An extrapolation from at most 1M passages on one node: HNSW graphs and merges grow faster than
linearly in time, so the projected indexing hours are a lower bound.
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

MIB = 1024 * 1024
GIB = 1024 * MIB
#: full KILT, the projection's target (icr2_components.stores.elasticsearch.index_plan.KILT_FULL_PASSAGES)
KILT_FULL_PASSAGES = 36_000_000
METHOD_LABELS = {"bm25": "BM25", "dense": "kNN", "hybrid": "hybrid"}


# ----------------------------------------------------------------------------------- fits and projections


def linear_fit(sizes: Sequence[float], values: Sequence[float]) -> dict:
    """Least squares ``value = a + b * n`` (a single point: through the origin)."""
    x, y = np.asarray(sizes, dtype=float), np.asarray(values, dtype=float)
    if len(x) == 1:
        a, b = 0.0, float(y[0] / x[0])
    else:
        b, a = (float(v) for v in np.polyfit(x, y, 1))
    return {"form": "a + b * n", "a": a, "b": b, "points": [[int(s), float(v)] for s, v in zip(x, y, strict=True)]}


def power_fit(sizes: Sequence[float], values: Sequence[float]) -> dict:
    """Least squares in log-log: ``value = c * n^k`` (a single point: k = 0)."""
    x, y = np.asarray(sizes, dtype=float), np.clip(np.asarray(values, dtype=float), 1e-9, None)
    if len(x) == 1:
        k, log_c = 0.0, float(np.log(y[0]))
    else:
        k, log_c = (float(v) for v in np.polyfit(np.log(x), np.log(y), 1))
    return {"form": "c * n^k", "c": math.exp(log_c), "k": k,
            "points": [[int(s), float(v)] for s, v in zip(x, y, strict=True)]}


def evaluate(fit: dict, n: float) -> float:
    return fit["a"] + fit["b"] * n if fit["form"] == "a + b * n" else fit["c"] * n ** fit["k"]


def projections(runs: list[dict], target: int, store: str) -> dict:
    """Fits of each cost of ``runs`` (one store) against size, and their value at ``target`` passages."""
    ok = [r for r in runs if "latency" in r]
    if not ok:
        return {}
    sizes = [r["passages"] for r in ok]
    fits: dict[str, dict] = {}
    if store == "elasticsearch":
        fits["disk_bytes"] = linear_fit(sizes, [r["disk_bytes"] for r in ok])
        fits["index_seconds"] = linear_fit(sizes, [r["index_seconds"] for r in ok])
        if all(r.get("es_peak_rss_bytes_loading") for r in ok):
            fits["es_peak_rss_bytes"] = linear_fit(sizes, [r["es_peak_rss_bytes_loading"] for r in ok])
        fits["python_peak_rss_bytes"] = linear_fit(sizes, [r["python_peak_rss_bytes"] for r in ok])
    else:
        fits["peak_rss_bytes"] = linear_fit(sizes, [r["peak_rss_bytes"] for r in ok])
        fits["saved_bytes"] = linear_fit(sizes, [r["saved_bytes"] for r in ok])
        fits["build_seconds"] = linear_fit(sizes, [r["build_seconds"] for r in ok])
    for method in ok[0]["latency"]:
        for key in ("p50_ms", "p99_ms"):
            values = [r["latency"][method][key] for r in ok]
            fits[f"{method}_{key}"] = power_fit(sizes, values)
            # the same points on a line too: exact search (the in-memory matrix, bm25s's score array) is linear in n,
            # HNSW about logarithmic, so the two fits bracket a latency better than either alone
            fits[f"{method}_{key}_linear"] = linear_fit(sizes, values)
    return {name: {**fit, "at_target": evaluate(fit, target)} for name, fit in fits.items()}


def baseline_ratios(runs: list[dict], store: str) -> list[dict]:
    """Each size against the smallest size measured in the same run (the baseline)."""
    ok = [r for r in runs if "latency" in r]
    if not ok:
        return []
    base = ok[0]
    rate = "passages_per_s"
    rows = []
    for r in ok:
        row = {"passages": r["passages"], "x_size": round(r["passages"] / base["passages"], 2),
               "x_passages_per_s": round(r[rate] / base[rate], 3)}
        if store == "elasticsearch":
            row["x_disk_per_passage"] = round(r["disk_bytes_per_passage"] / base["disk_bytes_per_passage"], 3)
        else:
            row["x_rss_per_passage"] = round(r["rss_bytes_per_passage"] / max(base["rss_bytes_per_passage"], 1e-9), 3)
        for method, lat in r["latency"].items():
            row[f"x_{method}_p50"] = round(lat["p50_ms"] / base["latency"][method]["p50_ms"], 3)
            row[f"x_{method}_p99"] = round(lat["p99_ms"] / base["latency"][method]["p99_ms"], 3)
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------- reporting


def human_bytes(value: float | None) -> str:
    if value is None:
        return "n/a"
    for unit, size in (("TiB", 1024**4), ("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if abs(value) >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f} B"


def markdown(payload: dict) -> str:
    lines = [
        "# Scale bench (`bench/scale.py`)",
        "",
        f"Command: `{payload['command']}`  ",
        (
            f"Machine: {payload['machine']['cpus']} CPUs ({payload['machine']['cpu_model']}), "
            f"{payload['machine']['memory_gib']} GiB; "
            f"load average at start {payload['machine']['load_average_at_start']}, at end "
            f"{payload['machine'].get('load_average_at_end')}  "
        ),
        f"Measured {payload['measured_at']}. {payload['corpus']['note']}",
        "",
    ]
    es = [r for r in payload["elasticsearch"] if "latency" in r]
    if es:
        node = payload["elasticsearch_node"]
        lines += [
            f"## Elasticsearch {node['version']} ({es[0]['layout']}; heap {human_bytes(node.get('heap_max_bytes'))})",
            "",
            "| passages | generated | passages/s | streaming passages/s | index s | disk | disk B/passage | segments | "
            "node RSS peak | Python RSS peak | "
            + " | ".join(f"{METHOD_LABELS[m]} p50 / p99 ms" for m in es[0]["latency"])
            + " |",
            "|" + "---|" * (10 + len(es[0]["latency"])),
        ]
        for r in es:
            stream = f"{r['stream_passages_per_s']:,.0f}" if r.get("stream_passages_per_s") else "n/a"
            lines.append(
                f"| {r['passages']:,} | {r['generated_passages']:,} | {r['passages_per_s']:,.0f} | {stream} | "
                f"{r['index_seconds']:,.1f} | "
                f"{human_bytes(r['disk_bytes'])} | {r['disk_bytes_per_passage']:,.0f} | {r['segments']} | "
                f"{human_bytes(r.get('es_peak_rss_bytes_loading'))} | {human_bytes(r['python_peak_rss_bytes'])} | "
                + " | ".join(f"{v['p50_ms']:.1f} / {v['p99_ms']:.1f}" for v in r["latency"].values())
                + " |"
            )
        lines.append("")
    mem = payload["in_memory"]
    if mem:
        measured = [r for r in mem if "latency" in r]
        methods = list(measured[0]["latency"]) if measured else []
        lines += [
            "## In-memory store (default; bm25s BM25, exact cosine matrix)",
            "",
            "| passages | build s | passages/s | saved file | peak RSS | RSS B/passage | first BM25 s | first dense s "
            "| "
            + " | ".join(f"{METHOD_LABELS[m]} p50 / p99 ms" for m in methods)
            + " | stops |",
            "|" + "---|" * (9 + len(methods)),
        ]
        for r in mem:
            if "latency" in r:
                lines.append(
                    f"| {r['passages']:,} | {r['build_seconds']:,.1f} | {r['passages_per_s']:,.0f} | "
                    f"{human_bytes(r['saved_bytes'])} | "
                    f"{human_bytes(r['peak_rss_bytes'])} | {r['rss_bytes_per_passage']:,.0f} | "
                    f"{r.get('first_bm25_query_seconds', 'n/a')} | "
                    f"{r.get('first_dense_query_seconds', 'n/a')} | "
                    + " | ".join(f"{v['p50_ms']:.1f} / {v['p99_ms']:.1f}" for v in r["latency"].values())
                    + f" | {r.get('stopped', '')} |"
                )
            else:
                lines.append(f"| {r['passages']:,} | | | | {human_bytes(r.get('peak_rss_bytes'))} | | | | "
                             + " | ".join("" for _ in methods) + f" | {r.get('stopped', '')} |")
        lines += ["", f"**Where it stops:** {payload['in_memory_stop']}", ""]
    for store, rows in payload["baseline_ratios"].items():
        if not rows:
            continue
        keys = [k for k in rows[0] if k != "passages"]
        lines += [
            f"## Against the smallest size of the run ({store})",
            "",
            "| passages | " + " | ".join(keys) + " |",
            "|" + "---|" * (len(keys) + 1),
        ]
        lines += [f"| {row['passages']:,} | " + " | ".join(str(row[k]) for k in keys) + " |" for row in rows]
        lines.append("")
    target = payload["projection"]["target_passages"]
    lines += [f"## Projection to {target:,} passages (full KILT)", "", payload["projection"]["note"], "",
              "| store | cost | fit | measured points | at " + f"{target / 1e6:.0f}M |", "|---|---|---|---|---|"]
    for store in ("elasticsearch", "in_memory"):
        for name, fit in payload["projection"][store].items():
            formula = (
                f"{fit['a']:.4g} + {fit['b']:.4g} n"
                if fit["form"] == "a + b * n"
                else f"{fit['c']:.4g} n^{fit['k']:.3f}"
            )
            points = ", ".join(f"{int(s):,}: {format_cost(name, v)}" for s, v in fit["points"])
            lines.append(f"| {store} | {name} | {formula} | {points} | {format_cost(name, fit['at_target'])} |")
    lines.append("")
    return "\n".join(lines)


def format_cost(name: str, value: float) -> str:
    if value < 0:
        return "n/a (fit falls with n)"
    if name.endswith("bytes"):
        return human_bytes(value)
    if name.endswith("seconds"):
        return f"{value / 3600:,.2f} h" if value >= 3600 else f"{value:,.1f} s"
    return f"{value:,.2f} ms"


def plot(payload: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = payload["projection"]["target_passages"]
    es = [r for r in payload["elasticsearch"] if "latency" in r]
    mem = [r for r in payload["in_memory"] if "latency" in r]
    figure, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    colours = {"bm25": "tab:blue", "dense": "tab:orange", "hybrid": "tab:green"}

    def panel(axis, title: str, ylabel: str) -> None:
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_title(title, fontsize=10)
        axis.set_ylabel(ylabel)
        axis.set_xlabel("passages (log)")
        axis.axvline(target, color="grey", linestyle=":", linewidth=0.8)
        axis.grid(True, which="major", alpha=0.3)

    def projected(axis, store: str, name: str, colour: str, scale: float = 1.0) -> None:
        fit = payload["projection"][store].get(name)
        if not fit:
            return
        xs = np.geomspace(fit["points"][0][0], target, 50)
        axis.plot(xs, [max(evaluate(fit, x), 1e-9) * scale for x in xs], linestyle="--", color=colour, linewidth=0.8)
        axis.plot([target], [max(fit["at_target"], 1e-9) * scale], marker="o", markerfacecolor="none", color=colour)

    axis = axes[0][0]
    panel(axis, "indexing passages/s (measured)", "passages/s")
    if es:
        axis.plot(
            [r["passages"] for r in es],
            [r["passages_per_s"] for r in es],
            "o-",
            color="tab:blue",
            label="Elasticsearch (whole build)",
        )
        if all(r.get("stream_passages_per_s") for r in es):
            axis.plot(
                [r["passages"] for r in es],
                [r["stream_passages_per_s"] for r in es],
                "o:",
                color="tab:blue",
                label="Elasticsearch (streaming phase)",
            )
    if mem:
        axis.plot(
            [r["passages"] for r in mem],
            [r["passages_per_s"] for r in mem],
            "s-",
            color="tab:red",
            label="in-memory (build + save)",
        )
    axis.legend(fontsize=8)

    axis = axes[0][1]
    panel(axis, "indexing time, projected to 36M (dashed)", "hours")
    if es:
        axis.plot(
            [r["passages"] for r in es],
            [r["index_seconds"] / 3600 for r in es],
            "o-",
            color="tab:blue",
            label="Elasticsearch",
        )
        projected(axis, "elasticsearch", "index_seconds", "tab:blue", 1 / 3600)
    if mem:
        axis.plot(
            [r["passages"] for r in mem],
            [r["build_seconds"] / 3600 for r in mem],
            "s-",
            color="tab:red",
            label="in-memory",
        )
        projected(axis, "in_memory", "build_seconds", "tab:red", 1 / 3600)
    axis.legend(fontsize=8)

    axis = axes[0][2]
    panel(axis, "disk (ES: primary store; in-memory: saved JSON)", "GiB")
    if es:
        axis.plot(
            [r["passages"] for r in es],
            [r["disk_bytes"] / GIB for r in es],
            "o-",
            color="tab:blue",
            label="Elasticsearch",
        )
        projected(axis, "elasticsearch", "disk_bytes", "tab:blue", 1 / GIB)
    if mem:
        axis.plot(
            [r["passages"] for r in mem],
            [r["saved_bytes"] / GIB for r in mem],
            "s-",
            color="tab:red",
            label="in-memory file",
        )
        projected(axis, "in_memory", "saved_bytes", "tab:red", 1 / GIB)
    axis.legend(fontsize=8)

    axis = axes[1][0]
    panel(axis, "RSS (peak)", "GiB")
    if es and all(r.get("es_peak_rss_bytes_loading") for r in es):
        axis.plot(
            [r["passages"] for r in es],
            [r["es_peak_rss_bytes_loading"] / GIB for r in es],
            "o-",
            color="tab:blue",
            label="Elasticsearch node",
        )
        projected(axis, "elasticsearch", "es_peak_rss_bytes", "tab:blue", 1 / GIB)
    if es:
        axis.plot(
            [r["passages"] for r in es],
            [r["python_peak_rss_bytes"] / GIB for r in es],
            "o-",
            color="tab:purple",
            label="Python (ES client)",
        )
    if mem:
        axis.plot(
            [r["passages"] for r in mem],
            [r["peak_rss_bytes"] / GIB for r in mem],
            "s-",
            color="tab:red",
            label="in-memory (child process)",
        )
        projected(axis, "in_memory", "peak_rss_bytes", "tab:red", 1 / GIB)
    limit = payload["limits"]["memory_limit_gb"]
    axis.axhline(limit, color="tab:red", linestyle=":", linewidth=0.8, label=f"in-memory limit {limit} GiB")
    axis.legend(fontsize=8)

    for axis, runs, store, title in ((axes[1][1], es, "elasticsearch", "Elasticsearch query latency"),
                                     (axes[1][2], mem, "in_memory", "in-memory query latency")):
        panel(axis, f"{title}: p50 (solid), p99 (dotted)", "ms")
        for method in (runs[0]["latency"] if runs else {}):
            xs = [r["passages"] for r in runs]
            axis.plot(
                xs,
                [r["latency"][method]["p50_ms"] for r in runs],
                "o-",
                color=colours[method],
                label=f"{METHOD_LABELS[method]} p50",
            )
            axis.plot(xs, [r["latency"][method]["p99_ms"] for r in runs], "o:", color=colours[method])
            projected(axis, store, f"{method}_p50_ms", colours[method])
        if runs:
            axis.legend(fontsize=8)
    figure.suptitle(
        "Cost against corpus size (real sample + generated passages; dashed: fit extrapolated to 36M passages, one "
        "node)",
        fontsize=11,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)

