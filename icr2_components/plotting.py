"""Every plot the package draws (matplotlib, Agg backend, PNG): head heatmaps and the comparison report's figures.

One module so that one style, one backend switch and one place to look serve the artifacts and the reports;
matplotlib is imported inside each function so that importing the package never loads it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from icr2_components.artifacts.ph3_heads import PH3HeadArtifact
    from icr2_components.artifacts.retrieval_heads import RetrievalHeadArtifact


def save_figure(figure, path: str | os.PathLike, tight: bool = False, dpi: int = 120) -> Path:
    """Lay out ``figure``, write it to ``path`` as PNG (its folder made), close it and return the path; ``tight``
    crops to what is drawn (for a legend outside the axes)."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi, **({"bbox_inches": "tight"} if tight else {}))
    plt.close(figure)
    return path


def plot_layer_head_heatmap(
    values: Sequence[Sequence[float]],
    outlined: Sequence[tuple[Sequence[Sequence[int]], str]],
    title: str,
    path: str | os.PathLike,
    cmap: str,
    vmin: float,
    vmax: float,
    colorbar_label: str | None = None,
) -> Path:
    """A layer x head heatmap of ``values[layer][head]`` with chosen heads outlined (``[(heads, colour), ...]``),
    written as PNG. Both head artifacts draw theirs with it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    layers, heads = len(values), len(values[0])
    figure, axis = plt.subplots(figsize=(max(4, heads * 0.6 + 2), max(4, layers * 0.25 + 1.5)))
    image = axis.imshow(values, aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax, origin="lower")
    for chosen, colour in outlined:
        for layer, head in chosen:
            axis.add_patch(Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor=colour, linewidth=1.5))
    axis.set_xlabel("head")
    axis.set_ylabel("layer")
    axis.set_xticks(range(heads))
    axis.set_title(title, fontsize=8)
    figure.colorbar(image, ax=axis, label=colorbar_label)
    return save_figure(figure, path)


def plot_hit_rate_heatmap(artifact: RetrievalHeadArtifact, path: str | os.PathLike, m: int | None = None) -> Path:
    """A layer x head heatmap of hit rates at M, the selected heads outlined."""
    m = m or artifact.m
    chance = artifact.chance_hit_rates[m - 1]
    return plot_layer_head_heatmap(
        artifact.hit_rates[m - 1], [(artifact.heads, "red")],
        f"{artifact.model}: hit rate @M={m} ({artifact.instances} instances, chance {chance:.2f})",
        path, cmap="viridis", vmin=0, vmax=1, colorbar_label="hit rate",
    )


def plot_ph3_scores(artifact: PH3HeadArtifact, path: str | os.PathLike, count: int = 8) -> Path:
    """A layer x head heatmap of the scores (red: toward context, blue: toward memory), top heads outlined."""
    bound = max(1e-9, max(abs(v) for row in artifact.scores for v in row))
    return plot_layer_head_heatmap(
        artifact.scores, [(artifact.context_heads[:count], "darkred"), (artifact.memory_heads[:count], "navy")],
        f"{artifact.model}: PH3 direct effect on logit(context) - logit(memory) ({artifact.instances} inst.)",
        path, cmap="coolwarm", vmin=-bound, vmax=bound,
    )


def _error_bar(value: float | None, interval: dict | None) -> list[list[float]] | None:
    """matplotlib's asymmetric error ``[[below], [above]]`` from an interval dict (``{"ci95": [low, high]}``)."""
    if value is None or not interval or interval.get("ci95") is None:
        return None
    low, high = interval["ci95"]
    return [[max(0.0, value - low)], [max(0.0, high - value)]]


# distinct hollow markers, largest first, so that pipelines at the same point stay visible as nested shapes
_PARETO_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "p", "*")


def plot_pareto(report: dict, path: Path) -> bool:
    """Faithfulness (x) vs robustness (y), one point per pipeline, the Pareto front joined; False without points.

    No text is drawn beside the points (names of pipelines at the same or nearby points would overlap): each
    pipeline has its own colour and hollow marker, nested when points coincide, and the legend outside the axes
    names it with its values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = {n: (v["faithfulness"], v["robustness"]) for n, v in report["cub"].items()
              if v["faithfulness"] is not None and v["robustness"] is not None}
    if not points:
        return False
    figure, axes = plt.subplots(figsize=(8.5, 5))
    colours = plt.get_cmap("tab10").colors
    count = len(points)
    has_bars = False
    for index, (name, (x, y)) in enumerate(points.items()):
        colour = colours[index % len(colours)]
        xerr, yerr = (_error_bar(value, (report["cub"][name].get("intervals") or {}).get(axis))
                      for value, axis in ((x, "faithfulness"), (y, "robustness")))
        if xerr is not None or yerr is not None:
            has_bars = True
            axes.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="none", ecolor=colour, elinewidth=1, capsize=3,
                          alpha=0.6, zorder=2)
        size = 60 + 110 * (count - 1 - index)  # earlier pipelines get bigger markers: coincident ones nest
        axes.scatter([x], [y], s=size, marker=_PARETO_MARKERS[index % len(_PARETO_MARKERS)], facecolors="none",
                     edgecolors=[colour], linewidths=1.8, zorder=3,
                     label=f"{name}  (F {x:.2f}, R {y:.2f})" + ("  *front" if name in report["pareto_front"] else ""))
    front = sorted((points[n] for n in report["pareto_front"]), key=lambda p: p[0])
    if len(front) > 1:
        axes.plot([p[0] for p in front], [p[1] for p in front], "--", color="grey", label="Pareto front", zorder=2)
    axes.set(xlim=(-0.05, 1.05), ylim=(-0.05, 1.05), xlabel="faithfulness F = avg(BCU gold, BCU conflicting)",
             ylabel="robustness R = BCU irrelevant",
             title="Faithfulness vs robustness (CUB)" + ("\nerror bars: 95% intervals" if has_bars else ""))
    axes.set_aspect("equal")
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, borderaxespad=0.0, labelspacing=1.2)
    figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")  # the legend sits outside the axes
    plt.close(figure)
    return True


def plot_context_types(report: dict, path: Path, metric: str = "answer_match") -> None:
    """Grouped bars: one metric per pipeline and context type, with its 95% interval as error bars (from the
    summary rows' ``intervals``, where present)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["summary"])
    kinds = list(next(iter(report["summary"].values())))
    width = 0.8 / max(len(kinds), 1)
    figure, axes = plt.subplots(figsize=(max(7, 1.6 * len(names) + 1.5), 4.2))
    has_intervals = False
    for i, kind in enumerate(kinds):
        rows = [report["summary"][n][kind] for n in names]
        values = [row[metric] or 0.0 for row in rows]
        bars = [_error_bar(row[metric], (row.get("intervals") or {}).get(metric)) for row in rows]
        errors = None
        if any(bars):
            has_intervals = True
            errors = [[bar[0][0] if bar else 0.0 for bar in bars], [bar[1][0] if bar else 0.0 for bar in bars]]
        axes.bar([j + i * width for j in range(len(names))], values, width, label=kind, yerr=errors,
                 error_kw={"elinewidth": 1, "capsize": 3, "ecolor": "dimgrey"})
    axes.set_xticks([j + width * (len(kinds) - 1) / 2 for j in range(len(names))], names, rotation=20, fontsize=8)
    title = f"{metric} by pipeline and context type" + ("\n(error bars: 95% interval)" if has_intervals else "")
    axes.set(ylim=(0, 1.05), ylabel=metric)
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8, title="context", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)


def plot_position_curves(section: dict, path: Path) -> bool:
    """One panel per metric, one line per pipeline over the buckets (gaps where a bucket is empty); False if none."""
    if not section["curves"]:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = section["buckets"]
    figure, panels = plt.subplots(1, len(section["metrics"]), figsize=(6 * len(section["metrics"]), 4.5), squeeze=False)
    count = len(section["curves"])
    for axes, metric in zip(panels[0], section["metrics"], strict=True):
        for index, (name, curve) in enumerate(section["curves"].items()):
            # pipelines side by side within a bucket, so that their error bars do not hide each other
            xs = [x + (index - (count - 1) / 2) * min(0.08, 0.6 / count) for x in range(len(buckets))]
            values = [curve[b][metric] for b in buckets]
            plotted = [float("nan") if v is None else v for v in values]  # NaN: a gap, not a false 0
            # positions form the line; "gold not shown" is no position, so it is a lone hollow marker
            line, = axes.plot(xs[:-1], plotted[:-1], marker="o", label=name)
            axes.plot(xs[-1:], plotted[-1:], marker="o", markerfacecolor="none", color=line.get_color())
            for x, bucket in zip(xs, buckets, strict=True):  # each bucket's 95% interval (Wilson), where it has answers
                bar = _error_bar(curve[bucket][metric], (curve[bucket].get("intervals") or {}).get(metric))
                if bar:
                    axes.errorbar([x], [curve[bucket][metric]], yerr=bar, fmt="none", ecolor=line.get_color(),
                                  elinewidth=1, capsize=2, alpha=0.6)
            for x, bucket in zip(xs, buckets, strict=True):
                if curve[bucket]["n"]:
                    axes.annotate(f"n={curve[bucket]['n']}", (x, curve[bucket][metric]), textcoords="offset points",
                                  xytext=(0, 6), fontsize=7, ha="center", color=line.get_color())
        axes.axvline(len(buckets) - 1.5, color="grey", linestyle=":", linewidth=1)
        axes.set_xticks(range(len(buckets)), buckets, rotation=20, fontsize=8)
        axes.set(ylim=(-0.05, 1.1), xlabel="position of the first gold passage", ylabel=metric,
                 title=f"{metric} by gold position ({section['context_type']}; bars: 95% intervals)")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def plot_gate_tradeoff(comparison: dict, path: str | os.PathLike, title: str = "retrieval gates") -> Path:
    """Retrieval rate (x) vs answer match (y): each scored gate's curve over every threshold, and every method's
    operating point with the 95% intervals of both (``evaluation.gates.gate_tradeoff.compare_methods``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 5.5))
    colours = plt.get_cmap("tab10").colors
    for index, (name, entry) in enumerate(comparison["methods"].items()):
        colour = colours[index % len(colours)]
        curve = entry.get("curve")
        if curve:
            axes.plot([p["retrieval_rate"] for p in curve], [p["answer_match"] for p in curve], "-", color=colour,
                      alpha=0.5, linewidth=1.2)
        x, y = entry["retrieval_rate"]["mean"], entry["answer_match"]["mean"]
        xerr, yerr = _error_bar(x, entry["retrieval_rate"]), _error_bar(y, entry["answer_match"])
        axes.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="o", color=colour, capsize=3, markersize=7,
                      label=f"{name}: rate {x:.2f}, match {y:.2f}, objective {entry['objective']['mean']:.3f}")
    axes.set(xlim=(-0.05, 1.05), xlabel="retrieval rate", ylabel="answer match",
             title=f"{title}\nn = {comparison['questions']}; lines: every threshold; points: each method's cut, "
                   f"95% intervals\nobjective = answer match - {comparison['cost']:g} x retrieval rate")
    axes.title.set_fontsize(9)
    axes.grid(alpha=0.3)
    # the legend goes under the axes: beside them its long labels squeezed the plot to a strip
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, ncol=1, borderaxespad=0.0)
    return save_figure(figure, path, tight=True)


def plot_reproduction(report: dict, path: str | os.PathLike) -> Path:
    """A registered experiment's figure (``icr2 reproduce``): one panel per curve (e.g. 10, 20, 30 documents), the
    user's accuracy by position for each variant with 95% Wilson error bars, the paper's figures for the same
    positions as dashed lines with the paper's model named, and the user's references (closed-book, oracle) as
    horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    experiment = report["experiment"]
    groups = list(dict.fromkeys(c["group"] for c in report["conditions"]))
    figure, panels = plt.subplots(1, len(groups), figsize=(4.6 * len(groups) + 1.5, 4.4), squeeze=False)
    colours = plt.get_cmap("tab10").colors
    variants = list(dict.fromkeys(c["variant"] for c in report["cells"]))
    models = list(dict.fromkeys(f["model"] for f in report["paper"]))
    paper = {(f["condition"], f["model"]): f["value"] for f in report["paper"]}
    for axes, group in zip(panels[0], groups, strict=True):
        points = [c for c in report["conditions"] if c["group"] == group]
        xs = [c["x"] for c in points]
        nudge = 0.012 * ((max(xs) - min(xs)) or 1)  # variants side by side, so coinciding points stay visible
        for index, variant in enumerate(variants):
            cells = {c["condition"]: c for c in report["cells"] if c["variant"] == variant and c["group"] == group}
            shown = [(c["x"], cells[c["name"]]) for c in points if cells[c["name"]]["accuracy"] is not None]
            if not shown:
                continue
            values = [cell["accuracy"] for _, cell in shown]
            errors = [[v - cell["ci95"][0] for v, (_, cell) in zip(values, shown, strict=True)],
                      [cell["ci95"][1] - v for v, (_, cell) in zip(values, shown, strict=True)]]
            offset = (index - (len(variants) - 1) / 2) * nudge
            axes.errorbar([x + offset for x, _ in shown], values, yerr=errors, marker="o", capsize=3,
                          color=colours[index % len(colours)], label=f"yours: {variant} (95% Wilson)")
        for index, model in enumerate(models):
            mine = [(c["x"], paper[(c["name"], model)]) for c in points if (c["name"], model) in paper]
            if mine:
                axes.plot([x for x, _ in mine], [v for _, v in mine], linestyle="--", marker="s", markersize=4,
                          color=colours[(len(variants) + index) % len(colours)], alpha=0.8,
                          label=f"paper: {model}")
        for (name, cell), style in zip(report["references"].items(), (":", "-.", "--"), strict=False):
            if cell.get("accuracy") is not None:
                axes.axhline(cell["accuracy"], color="grey", linestyle=style, linewidth=1,
                             label=f"yours: {name} {cell['accuracy']:.2f}")
        axes.set(title=group, xlabel=experiment.get("x_label") or "position of the relevant information",
                 ylabel="accuracy", ylim=(-0.03, 1.03), xticks=xs)
        axes.grid(alpha=0.3)
    handles, labels = {}, []
    for axes in panels[0]:
        for handle, label in zip(*axes.get_legend_handles_labels(), strict=True):
            if label not in handles:
                handles[label] = handle
                labels.append(label)
    figure.legend([handles[label] for label in labels], labels, loc="lower center", ncol=min(3, len(labels)),
                  fontsize=8, bbox_to_anchor=(0.5, -0.02 - 0.045 * ((len(labels) + 2) // 3)))
    figure.suptitle(f"{experiment['title']}: yours (n = {report['questions']['complete']}) beside "
                    f"{experiment.get('figure') or 'the paper'}", fontsize=10)
    return save_figure(figure, path, tight=True)
