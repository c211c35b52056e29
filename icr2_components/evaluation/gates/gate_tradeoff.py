"""What a retrieval gate costs and gains on labelled questions: the trade-off curve, a threshold picked for an
objective, and every method compared with intervals.

The labels (``evaluation.gates.need_labels``) keep both of the reader's answers, so any decision's answer match is known
without answering again: ``retrieve ? context_match : closed_book_match``. The **objective** of a set of decisions
is

    answer match - lambda x retrieval rate

(the mean over questions of ``match_i - lambda * retrieve_i``): lambda is what one retrieval is worth in answer
match (lambda = 0.1: retrieving for 10 questions must win at least one more right answer). lambda = 0 asks only for
answers (always-retrieve wins whenever context never hurts); a large lambda asks for few retrievals.

- :func:`tradeoff_curve`: for a score (P(yes), a learned probability), every cut "retrieve when score >= cut"
  over its distinct values (and one above all: never): retrieval rate, answer match and objective per cut.
- :func:`pick_cut`: the cut with the best objective (ties: the lower retrieval rate), placed midway between the
  lowest retrieved score and the highest one left out, so that it does not sit on a training score.
- :func:`compare_methods`: per method, retrieval rate and answer match (Wilson), the objective (BCa bootstrap over
  questions), the AUROC of its score against the labels (bootstrap over questions, both classes resampled
  together), and paired tests against always-retrieve (answer match: exact McNemar; objective: sign-flip
  permutation), Holm-adjusted across the methods (``evaluation.statistics.paired_comparison``).

Usage:
    >>> from icr2_components.evaluation.gates.gate_tradeoff import pick_cut, tradeoff_curve
    >>> labels = read_labels(["runs/labels/dev.jsonl"])[0]
    >>> pick_cut(p_yes, labels, cost=0.1)["cut"]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from icr2_components.evaluation.statistics.auroc import auroc_difference, auroc_interval
from icr2_components.evaluation.statistics.intervals import DEFAULT_SEED, mean_interval
from icr2_components.evaluation.statistics.paired_comparison import ALPHA, compare_paired, holm, verdict

OBJECTIVE = "answer match - lambda x retrieval rate"
BASELINE = "always"
# the gates a new one must beat: RetrievalQA's TA-ARE prompt and the plain prompt, both scored by P(yes)
REFERENCES = ("ta_are", "vanilla")


def check_cost(cost: float) -> float:
    if (
        isinstance(cost, bool)
        or not isinstance(cost, (int, float))
        or not 0.0 <= float(cost) <= 1.0
        or math.isnan(cost)
    ):
        raise ValueError(f"--cost (lambda, answer match one retrieval is worth) must be in [0, 1], got {cost!r}.")
    return float(cost)


def answer_matches(decisions: Sequence[bool], labelled: Sequence[Any]) -> np.ndarray:
    """1/0 per question: the context answer's match where the decision retrieves, else the closed-book one's."""
    if len(decisions) != len(labelled):
        raise ValueError(f"Got {len(decisions)} decisions for {len(labelled)} labelled questions.")
    return np.asarray([float(q.context_match if d else q.closed_book_match)
                       for d, q in zip(decisions, labelled, strict=True)])


def objective_values(decisions: Sequence[bool], labelled: Sequence[Any], cost: float) -> np.ndarray:
    """Per question ``match - cost * retrieve``; their mean is the objective."""
    return answer_matches(decisions, labelled) - cost * np.asarray([float(bool(d)) for d in decisions])


def _point(cut: float, decisions: np.ndarray, labelled: Sequence[Any], cost: float) -> dict[str, float]:
    matches = answer_matches(list(decisions), labelled)
    rate = float(np.mean(decisions)) if len(decisions) else 0.0
    return {"cut": float(cut), "retrieval_rate": rate, "answer_match": float(np.mean(matches)),
            "objective": float(np.mean(matches) - cost * rate)}


def tradeoff_curve(scores: Sequence[float], labelled: Sequence[Any], cost: float = 0.0) -> list[dict[str, float]]:
    """Every distinct cut of ``scores`` (retrieve when score >= cut), highest first, then "above all" (never)."""
    cost = check_cost(cost)
    values = np.asarray(scores, dtype=float)
    if len(values) != len(labelled) or not len(values):
        raise ValueError(f"A trade-off curve needs one score per labelled question; got {len(values)} scores for "
                         f"{len(labelled)} questions.")
    if np.isnan(values).any():
        raise ValueError("A trade-off curve needs a score for every question (a gate reply without P(yes) has none).")
    distinct = sorted(set(values.tolist()), reverse=True)
    points = [_point(math.nextafter(distinct[0], math.inf), values >= math.inf, labelled, cost)]
    points += [_point(cut, values >= cut, labelled, cost) for cut in distinct]
    return points


def pick_cut(scores: Sequence[float], labelled: Sequence[Any], cost: float) -> dict[str, Any]:
    """The point of :func:`tradeoff_curve` with the best objective (ties: lower retrieval rate), its ``cut`` moved
    midway to the next lower distinct score; ``curve`` holds every point."""
    curve = tradeoff_curve(scores, labelled, cost)
    best_index = max(range(len(curve)), key=lambda i: (round(curve[i]["objective"], 12), -curve[i]["retrieval_rate"]))
    best = dict(curve[best_index])
    distinct = sorted(set(float(s) for s in scores), reverse=True)
    if best_index == 0:
        cut = best["cut"]  # never retrieve: just above the highest score
    else:
        lower = distinct[best_index] if best_index < len(distinct) else None
        cut = best["cut"] if lower is None else (best["cut"] + lower) / 2
    best["score_cut"] = best["cut"]
    best["cut"] = float(cut)
    return {**best, "cost": float(cost), "objective_name": OBJECTIVE, "curve": curve}


def compare_methods(methods: dict[str, dict[str, Any]], labelled: Sequence[Any], cost: float,
                    seed: int = DEFAULT_SEED, baseline: str = BASELINE) -> dict[str, Any]:
    """``methods``: name -> ``{"decisions": [bool], "scores": [float] or None}`` on the same ``labelled``
    questions. Returns per method its numbers with intervals, paired tests against ``baseline`` (Holm across
    methods) and, for scored methods, the trade-off curve."""
    cost = check_cost(cost)
    if baseline not in methods:
        raise ValueError(f"The comparison needs the baseline method {baseline!r} among {list(methods)}.")
    labels = [q.needs_retrieval for q in labelled]
    base_matches = answer_matches(methods[baseline]["decisions"], labelled)
    base_objective = objective_values(methods[baseline]["decisions"], labelled, cost)
    results: dict[str, Any] = {}
    for name, method in methods.items():
        decisions = [bool(d) for d in method["decisions"]]
        matches = answer_matches(decisions, labelled)
        values = objective_values(decisions, labelled, cost)
        scores = method.get("scores")
        entry: dict[str, Any] = {
            "n": len(decisions),
            "retrieval_rate": mean_interval([float(d) for d in decisions], seed),
            "answer_match": mean_interval(matches.tolist(), seed),
            "objective": mean_interval(values.tolist(), seed),
            "auroc": auroc_interval(scores, labels, seed) if scores is not None else None,
            "cut": method.get("cut"),
        }
        if scores is not None:
            entry["curve"] = tradeoff_curve(scores, labelled, cost)
        if name != baseline:
            entry["vs_always"] = {"answer_match": compare_paired(matches, base_matches, seed),
                                  "objective": compare_paired(values, base_objective, seed)}
        results[name] = entry
    others = [n for n in results if n != baseline]
    for metric in ("answer_match", "objective"):
        adjusted = holm([results[n]["vs_always"][metric]["p_value"] for n in others]) if others else []
        for name, p in zip(others, adjusted, strict=True):
            comparison = results[name]["vs_always"][metric]
            comparison["p_holm"] = p
            comparison["verdict"] = verdict(comparison["difference"]["mean"], p, len(labelled), comparison["mde"],
                                            largest=1.0 + cost if metric == "objective" else 1.0)
    references = compare_with_references(methods, labelled, cost, seed, skip=(baseline, "never"))
    return {
        "cost": cost,
        "objective": OBJECTIVE,
        "baseline": baseline,
        "questions": len(labelled),
        "labelled": sum(1 for label in labels if label is not None),
        "needs_retrieval": sum(1 for label in labels if label),
        "methods": results,
        "versus_references": references,
        "seed": seed,
    }


def compare_with_references(methods: dict[str, dict[str, Any]], labelled: Sequence[Any], cost: float,
                            seed: int = DEFAULT_SEED, references: Sequence[str] = REFERENCES,
                            skip: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every scored method that is not a reference against each reference gate present (by default TA-ARE and
    the vanilla prompt: what a new gate must beat): the AUROC difference (bootstrap interval, DeLong p) and the
    objective difference (paired: sign-flip p), each family Holm-adjusted across the pairs. Pairs whose AUROC is
    undefined (a class missing) keep the objective and say why."""
    labels = [q.needs_retrieval for q in labelled]
    # a reference is found by its method (``vanilla``, ``ta_are`` without an artifact), whatever its display name
    present = [n for n, m in methods.items() if m.get("method", n) in references and not m.get("artifact")
               and m.get("scores") is not None]
    pairs = []
    for name, method in methods.items():
        if name in present or name in skip or method.get("scores") is None:
            continue
        values = objective_values(method["decisions"], labelled, cost)
        for reference in present:
            pair: dict[str, Any] = {"method": name, "reference": reference}
            try:
                pair["auroc"] = auroc_difference(method["scores"], methods[reference]["scores"], labels, seed)
            except ValueError as error:
                pair["auroc"] = {"undefined": str(error)}
            pair["objective"] = compare_paired(values, objective_values(methods[reference]["decisions"], labelled,
                                                                        cost), seed)
            pairs.append(pair)
    for metric in ("auroc", "objective"):
        tested = [p for p in pairs if "p_value" in p[metric]]
        for pair, adjusted in zip(tested, holm([p[metric]["p_value"] for p in tested]) if tested else [], strict=True):
            pair[metric]["p_holm"] = adjusted
            difference = pair[metric]["difference"]
            low = difference["ci95"][0] if difference["ci95"] else difference["mean"]
            pair[metric]["beats"] = bool(adjusted < ALPHA and low > 0)
    return pairs


def intersection_union_claim(pairs: Sequence[dict[str, Any]], method: str, alpha: float = ALPHA) -> dict[str, Any]:
    """Whether ``method`` beats every reference gate on every metric of ``compare_with_references``'s pairs, as one
    pre-named claim: each comparison must have an unadjusted p < ``alpha`` and a 95% interval above 0.

    This is an intersection-union test (Berger 1982, Technometrics 24:295): the claim's null is that *some*
    comparison fails, and rejecting it needs every comparison to reject, so the claim's level is ``alpha`` without
    a multiplicity adjustment (Holm is for claiming *any* member of a family). It is valid only for a method named
    before the data were seen; picking the best of several on the same questions needs Holm across them instead.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}.")
    mine = [p for p in pairs if p["method"] == method]
    if not mine:
        known = sorted({p["method"] for p in pairs})
        raise ValueError(f"no comparison of {method!r} with a reference gate; compared methods: {known}. Name a "
                         "scored, non-reference method of --methods (and include vanilla and ta_are).")
    parts = []
    for pair in mine:
        for metric in ("auroc", "objective"):
            part = pair[metric]
            if "p_value" not in part:
                parts.append({"reference": pair["reference"], "metric": metric, "holds": False,
                              "why": part.get("undefined", "no test")})
                continue
            difference = part["difference"]
            low = difference["ci95"][0] if difference["ci95"] else difference["mean"]
            holds = bool(part["p_value"] < alpha and low > 0)
            parts.append({"reference": pair["reference"], "metric": metric, "difference": difference["mean"],
                          "ci95": difference["ci95"], "p_value": part["p_value"], "holds": holds})
    return {"method": method, "alpha": alpha, "test": "intersection-union (every comparison p < alpha, interval > 0)",
            "references": sorted({p["reference"] for p in mine}), "parts": parts,
            "holds": all(part["holds"] for part in parts)}


def format_comparison_table(comparison: dict[str, Any], title: str):
    """A rich Table: one row per method with its intervals and the paired verdicts against always-retrieve."""
    from rich.table import Table

    from icr2_components.evaluation.statistics.intervals import format_interval

    table = Table(title=title)
    for column in ("method", "cut", "retrieval rate", "answer match", f"objective (λ={comparison['cost']:g})",
                   "AUROC", "Δ match vs always (p Holm)", "Δ objective vs always (p Holm)"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for name, entry in comparison["methods"].items():
        def versus(metric: str, entry: dict = entry) -> str:
            if "vs_always" not in entry:
                return "baseline"
            c = entry["vs_always"][metric]
            return f"{format_interval(c['difference'])} (p {c['p_holm']:.3g})"
        cut = entry.get("cut")
        table.add_row(name, "-" if cut is None else f"{cut:.3f}", format_interval(entry["retrieval_rate"]),
                      format_interval(entry["answer_match"]), format_interval(entry["objective"]),
                      format_interval(entry["auroc"]) if entry["auroc"] else "-", versus("answer_match"),
                      versus("objective"))
    return table


def format_reference_table(comparison: dict[str, Any], title: str):
    """A rich Table of ``compare_with_references``: per (method, reference) the AUROC and objective differences
    with intervals and Holm-adjusted p-values, and whether the method beats the reference on each."""
    from rich.table import Table

    from icr2_components.evaluation.statistics.intervals import format_interval

    table = Table(title=title)
    for column in ("method", "against", "Δ AUROC (DeLong p Holm)", f"Δ objective (λ={comparison['cost']:g}) (p Holm)",
                   "beats it"):
        table.add_column(column, justify="left" if column in ("method", "against") else "right")
    for pair in comparison.get("versus_references", []):
        def cell(part: dict) -> str:
            if "undefined" in part:
                return "undefined"
            return f"{format_interval(part['difference'])} (p {part['p_holm']:.3g})"
        beats = [m for m in ("auroc", "objective") if pair[m].get("beats")]
        table.add_row(pair["method"], pair["reference"], cell(pair["auroc"]), cell(pair["objective"]),
                      " and ".join(beats) if beats else "no")
    return table


def format_curve_table(name: str, curve: Sequence[dict[str, float]], title: str | None = None):
    from rich.table import Table

    table = Table(title=title or f"trade-off curve: {name} (retrieve when score >= cut)")
    for column in ("cut", "retrieval rate", "answer match", "objective"):
        table.add_column(column, justify="right")
    for point in curve:
        table.add_row(f"{point['cut']:.4f}", f"{point['retrieval_rate']:.3f}", f"{point['answer_match']:.3f}",
                      f"{point['objective']:.3f}")
    return table


__all__ = ["BASELINE", "OBJECTIVE", "REFERENCES", "answer_matches", "auroc_interval", "check_cost",
           "compare_methods", "compare_with_references", "format_comparison_table", "format_curve_table",
           "format_reference_table", "objective_values", "pick_cut", "tradeoff_curve"]
