"""CUB's benchmark of context-utilisation techniques (Hagström et al., arXiv:2505.16518), registered as an experiment
(``icr2 reproduce cub``): every technique of the library over CUB's gold, conflicting and irrelevant contexts,
scored with BCU; faithfulness (the mean of BCU gold and conflicting) against robustness (BCU irrelevant), the
Pareto front, each technique paired against regular decoding on the same questions.

The run is one ``icr2 compare`` (``run_compare``, ``out/compare``: its answer cache, resume, concurrency against a
server and its own report) of the shipped technique pipelines (found by name inside the installed package, so the
preset runs from the wheel alone) and closed-book, whose answer is BCU's memory target ``t_M`` for irrelevant
contexts, over compare's ``gold``, ``conflicting`` and ``irrelevant`` context types (``kilt.context_types``: the
gold passage; the gold passage with its answer replaced by a same-type substitute; the best-ranked BM25 passage of
the index without the answer). The numbers are compare's (``summary``, ``cub``: Wilson intervals for BCU, a
bootstrap resampling questions jointly over gold and conflicting for faithfulness); the paired comparisons with
regular decoding (exact McNemar for BCU, sign-flip permutation for the per-question faithfulness, Holm across the
techniques) are computed here from the same cached answers with compare's statistics.

A technique that needs the model's logits or attention (CAD, ACD, COIECD, PH3) cannot run on a served model that
exposes only generated tokens: with such a ``--backend`` it is refused, with the backend's reason, and listed in
the report's ``refused``; prompting, multi-agent and regular decoding run there.

Usage example:
```python
from icr2_components.evaluation.experiments.runner import run_experiment

report = run_experiment("cub", limit=2, out_dir="runs/cub", options={"techniques": "cad"}, progress=False)
print(report["techniques"]["cmt_cad"]["faithfulness"], report["pareto_front"], report["refused"])
```
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any, ClassVar

from icr2_components.errors import UserInputError
from icr2_components.evaluation.experiments.protocol import (
    Condition,
    Experiment,
    PaperFigure,
    RunSettings,
    Variant,
    register_experiment,
)

#: (short name, shipped pipeline, label, CUB's name for it or None where the paper does not run it)
TECHNIQUES: tuple[tuple[str, str, str, str | None], ...] = (
    ("regular", "vanilla_rag", "regular decoding: the ICR2 QA prompt, one call", "Regular"),
    ("prompting", "cmt_prompting", "prompting: a context-use instruction leads the prompt", "Prompting"),
    ("multi_agent", "cmt_multi_agent", "multi-agent: a relevance judge, then a faithful or memory answer",
     "Multi-agent"),
    ("cad", "cmt_cad", "CAD: context-aware decoding (Shi et al.), logits with and without the context", None),
    ("acd", "cmt_acd", "ACD: entropy-weighted mix of the logits with and without the context", "ACD"),
    ("coiecd", "cmt_coiecd", "COIECD: conflict detection by entropy, then contrastive decoding", "COIECD"),
    ("ph3_context", "cmt_ph3_context", "PH3 +context: memory attention heads suppressed", "PH3 +context"),
    ("ph3_memory", "cmt_ph3_memory", "PH3 +memory: context attention heads suppressed", "PH3 +memory"),
)
REGULAR = "vanilla_rag"
MEMORY = "closed_book"
CONTEXT_TYPES = ("gold", "conflicting", "irrelevant")
#: the measures paired against regular decoding: BCU per context type and faithfulness (robustness = irrelevant)
MEASURES = ("faithfulness", "gold", "conflicting", "irrelevant")
QUESTION_IDS = "cub_nq_ids.txt"

# Table 3 of the paper: the (model, technique) points on each dataset's faithfulness/robustness Pareto front,
# in percent as printed: (dataset, model, CUB's technique, faithfulness, robustness)
_TABLE_3 = (
    ("CounterFact", "Qwen2.5-32B", "Prompting", 100.0, 80.67),
    ("CounterFact", "Pythia-6.9B", "Regular", 78.27, 91.48),
    ("CounterFact", "Qwen2.5-32B-Instruct", "Multi-agent", 60.32, 100.0),
    ("NQ", "Qwen2.5-32B", "Fine-tuning", 74.22, 46.28),
    ("NQ", "Qwen2.5-32B-Instruct", "ACD", 67.66, 57.35),
    ("NQ", "Qwen2.5-7B-Instruct", "Multi-agent", 59.14, 73.32),
    ("DRUID", "Qwen2.5-32B-Instruct", "Multi-agent", 74.34, 94.12),
    ("DRUID", "Qwen2.5-1.5B", "COIECD", 46.33, 100.0),
)
_SOURCE = "Table 3 (points on the Pareto front)"


def _paper_figures() -> tuple[PaperFigure, ...]:
    figures = []
    for dataset, model, technique, faithful, robust in _TABLE_3:
        figures += [PaperFigure(model, f"{dataset}: {technique}, faithfulness", faithful / 100, _SOURCE),
                    PaperFigure(model, f"{dataset}: {technique}, robustness", robust / 100, _SOURCE)]
    return tuple(figures)


def paper_points() -> list[dict[str, Any]]:
    """Table 3's points: ``dataset``, ``model``, ``technique`` (CUB's name), ``faithfulness``, ``robustness`` (0..1)."""
    return [{"dataset": d, "model": m, "technique": t, "faithfulness": f / 100, "robustness": r / 100,
             "source": _SOURCE} for d, m, t, f, r in _TABLE_3]


def registered_question_ids() -> list[str]:
    """The registered questions' NQ-sample ids, in order (shipped with the package)."""
    from icr2_components.evaluation.compare.splits import read_question_ids

    return read_question_ids(Path(str(files("icr2_components.resources") / "experiments" / QUESTION_IDS)))


def _selected_techniques(value: str | None) -> list[tuple[str, str, str, str | None]]:
    """The techniques a run asks for (``--set techniques=a,b``: short or pipeline names), regular decoding first
    and always; all by default."""
    if value is None:
        return list(TECHNIQUES)
    asked = [item.strip() for item in value.split(",") if item.strip()]
    known = {name: entry for entry in TECHNIQUES for name in entry[:2]}
    unknown = [item for item in asked if item not in known]
    if not asked or unknown:
        raise UserInputError(f"--set techniques={value!r}: {unknown or 'nothing'} is not a technique of cub; the "
                             f"techniques: {', '.join(t[0] for t in TECHNIQUES)} (or their pipelines: "
                             f"{', '.join(t[1] for t in TECHNIQUES)}).")
    chosen = {known[item][1] for item in asked} | {REGULAR}
    return [entry for entry in TECHNIQUES if entry[1] in chosen]


def _bcu_by_question(compare_report: dict[str, Any], context_types: list[str], scored: list[dict] | None = None
                     ) -> dict[str, dict[str, dict[str, float]]]:
    """``{pipeline: {context type: {question id: BCU}}}`` of the run's answers (compare's ``record_bcu`` with the
    closed-book answer as memory target); answers with an error are left out, as compare leaves them. ``scored``:
    the records compare scored (``run_compare``'s ``records_out``: each with the questions' gold now); None: its
    cache file as written."""
    from icr2_components.evaluation.compare.cache import read_answer_records
    from icr2_components.evaluation.reports.compare_report import memory_answers, record_bcu

    run = compare_report["run"]
    names = {info["hash"]: name for name, info in run["pipelines"].items()}
    wanted = set(run["question_ids"])
    records = [dict(r) for r in (scored if scored is not None else read_answer_records(run["cache"]))
               if r["pipeline_hash"] in names and r["question_id"] in wanted and r["context_type"] in context_types
               and not r.get("error")]
    for record in records:
        record["pipeline"] = names[record["pipeline_hash"]]
    memory = memory_answers(records, {MEMORY})
    scores: dict[str, dict[str, dict[str, float]]] = {name: {t: {} for t in context_types} for name in names.values()}
    for record in records:
        value = record_bcu(record, memory)
        if value is not None:
            scores[record["pipeline"]][record["context_type"]][record["question_id"]] = float(value)
    return scores


def _per_question(scores: dict[str, dict[str, float]], measure: str) -> dict[str, float]:
    """One pipeline's per-question value of ``measure``: BCU of a context type, or faithfulness = the mean of BCU
    gold and conflicting on a question that has both."""
    if measure != "faithfulness":
        return dict(scores.get(measure, {}))
    gold, conflicting = scores.get("gold", {}), scores.get("conflicting", {})
    return {q: (gold[q] + conflicting[q]) / 2 for q in gold if q in conflicting}


def paired_against_regular(scores: dict[str, dict[str, dict[str, float]]], techniques: list[str],
                           context_types: list[str], seed: int) -> list[dict[str, Any]]:
    """Each technique against regular decoding on the questions both answered, per measure (faithfulness, BCU per
    context type; robustness is BCU irrelevant): compare's ``compare_paired`` (exact McNemar for 0/1 BCU, sign-flip
    permutation for faithfulness's halves), Holm across the techniques per measure, compare's verdict."""
    from icr2_components.evaluation.statistics.paired_comparison import ALPHA, compare_paired, holm, verdict

    measures = [m for m in MEASURES if m in context_types
                or (m == "faithfulness" and {"gold", "conflicting"} <= set(context_types))]
    rows = []
    for measure in measures:
        base = _per_question(scores.get(REGULAR, {}), measure)
        family = []
        for name in techniques:
            if name == REGULAR:
                continue
            mine = _per_question(scores.get(name, {}), measure)
            common = [q for q in base if q in mine]
            if common:
                family.append((name, common, [mine[q] for q in common], [base[q] for q in common]))
        results = []
        for name, common, a, b in family:
            result = compare_paired(a, b, seed, mde_alpha=ALPHA / len(family))
            results.append({"technique": name, "baseline": REGULAR, "measure": measure, "n": len(common), **result,
                            "family_size": len(family)})
        for result, adjusted in zip(results, holm([r["p_value"] for r in results]), strict=True):
            result["p_holm"] = adjusted
            result["verdict"] = verdict(result["difference"]["mean"], adjusted, result["n"], result["mde"],
                                        largest=1.0)
        rows += results
    return rows


@register_experiment
class ContextUtilisationBenchmark(Experiment):
    name = "cub"
    paper = ("Hagström et al., \"CUB: Benchmarking Context Utilisation Techniques for Language Models\" (ACL 2026; "
             "arXiv:2505.16518), BCU, faithfulness and robustness, Table 3")
    title = "context-utilisation techniques over gold, conflicting and irrelevant contexts"
    claim = ("The paper finds that every context-utilisation technique trades faithfulness to relevant context "
             "(mean BCU over gold and conflicting) against robustness to irrelevant context (BCU irrelevant): no "
             "technique dominates, gains in one context type are offset in another on NQ and DRUID, and the Pareto "
             "front never collapses to one point (Table 3: on NQ, (Qwen2.5-32B, Fine-tuning) 74.22 faithfulness "
             "with 46.28 robustness, (Qwen2.5-7B-Instruct, Multi-agent) 59.14 with 73.32).")
    questions = ("the first N of 100 held-out questions of the bundled NQ sample (a seeded sample of positions "
                 ">= 1000, shipped as resources/experiments/cub_nq_ids.txt; the questions of bench/results/ab_cub), "
                 "each under CUB's three contexts of one passage: the gold passage, the gold passage with its "
                 "answer replaced by a same-type substitute (questions whose gold passage lacks the answer string "
                 "get none, counted), the best-ranked BM25 passage of the kilt-sample index without the answer.")
    metric = ("BCU (CUB's binary context utilisation): the gold answer (gold), the substitute (conflicting) or the "
              "closed-book answer (irrelevant: the memory target) appears in the reply, normalised; faithfulness = "
              "mean of BCU gold and conflicting, robustness = BCU irrelevant")
    registered_size = 100
    registered_max_new_tokens = 32
    paper_figures = _paper_figures()
    paper_notes = (
        "Table 3 prints only the points on each dataset's Pareto front (8 (model, technique) pairs over CounterFact, "
        "NQ and DRUID); the paper's per-technique BCU for every model is not in the text at hand, so only those "
        "points stand beside yours.",
        "The paper's models: GPT2-XL, Pythia-6.9B, Qwen2.5 1.5B/7B/32B base and instruct, Command R, GPT-4o mini "
        "and GPT-4o; the paper tunes every technique's settings on a dev set for the best mean BCU, the shipped "
        "pipelines here run their defaults (tune them with icr2 compare --tune).",
        "CUB's Fine-tuning technique is not run here (no shipped pipeline; icr2-fine-tuning trains arms); CAD is "
        "the library's, not among the paper's techniques.",
    )
    figure_title = "faithfulness against robustness (the paper's Table 3 Pareto points beside)"
    x_label = "faithfulness"
    options: ClassVar[dict[str, str]] = {
        "techniques": "a comma-separated subset of the techniques (regular, prompting, multi_agent, cad, acd, "
                      "coiecd, ph3_context, ph3_memory, or their pipeline names); regular decoding and "
                      "closed-book always run; default all (a subset is not at the registered size)"
    }

    def conditions(self) -> list[Condition]:
        labels = {"gold": "gold: the gold passage",
                  "conflicting": "conflicting: the gold passage, its answer substituted",
                  "irrelevant": "irrelevant: a retrieved passage without the answer"}
        return [Condition(kind, "context type", index, labels[kind]) for index, kind in enumerate(CONTEXT_TYPES, 1)]

    def variants(self) -> list[Variant]:
        return [Variant(pipeline, label) for _, pipeline, label, _ in TECHNIQUES]

    def reference_variants(self) -> list[Variant]:
        return [Variant(MEMORY, "closed-book: no passage; its answer is BCU's memory target for irrelevant contexts")]

    # -- the run ---------------------------------------------------------------------------------------------

    def run(self, settings: RunSettings) -> dict[str, Any]:
        from icr2_components.backends import BackendError
        from icr2_components.evaluation.compare.run import run_compare
        from icr2_components.pipeline_spec import PipelineSpec
        from icr2_components.resources import shipped_file

        chosen = _selected_techniques(settings.options.get("techniques"))
        refused, kept = [], []
        for short, pipeline, _label, _ in chosen:
            path = shipped_file("pipelines", pipeline)
            try:  # what compare does first: a component the backend cannot serve is refused here, with why
                PipelineSpec.from_file(str(path), backend=settings.backend)
            except BackendError as error:  # the message opens with the file's path: the pipeline's name is shorter
                reason = str(error).removeprefix(f"{path}: ")
                refused.append({"technique": short, "pipeline": pipeline, "reason": reason})
                continue
            kept.append((short, pipeline, path))
        if not any(pipeline == REGULAR for _, pipeline, _ in kept):
            raise UserInputError(f"cub: regular decoding ({REGULAR}) cannot run: "
                                 + "; ".join(r["reason"] for r in refused if r["pipeline"] == REGULAR))
        if len(kept) < 2:
            raise UserInputError("cub: every technique asked for besides regular decoding is refused: "
                                 + "; ".join(f"{r['technique']}: {r['reason']}" for r in refused))
        ids = registered_question_ids()
        ids = ids[:settings.limit] if settings.limit else ids
        types = [c.name for c in settings.conditions]
        common = settings.compare_settings()
        # the registered budget is the shipped pipelines' own (32 answer tokens): at it compare passes none, so the
        # multi-agent judge keeps its 3-token yes/no; another budget caps every generating component, as compare does
        common["max_new_tokens"] = (None if settings.max_new_tokens == self.registered_max_new_tokens
                                    else settings.max_new_tokens)
        paths = [str(path) for _, _, path in kept] + [str(shipped_file("pipelines", MEMORY))]
        records: list[dict] = []  # scored with the questions' gold now, not a cached answer's
        compared = run_compare(paths, dataset=None, context_types=types, question_ids=ids,
                               out_dir=settings.out / "compare", baseline=REGULAR, records_out=records, **common)
        return self.build(compared, [pipeline for _, pipeline, _ in kept], refused, types, settings, records)

    def build(self, compared: dict[str, Any], techniques: list[str], refused: list[dict[str, str]],
              types: list[str], settings: RunSettings, records: list[dict] | None = None) -> dict[str, Any]:
        """The report from compare's run: its BCU cells and faithfulness/robustness with their intervals, the
        Pareto front over the techniques (closed-book, robust by construction, is the reference, not a point of
        it), the paired comparisons with regular decoding, the paper's points."""
        from icr2_components.evaluation.metrics.bcu import pareto_front
        from icr2_components.evaluation.reports.compare_report import pareto_status

        summary, cub = compared["summary"], compared["cub"]
        entries = {}
        for name in [*techniques, MEMORY]:
            short, label, paper_name = next(((s, lab, p) for s, pipe, lab, p in TECHNIQUES if pipe == name),
                                            ("closed_book", self.reference_variants()[0].label, None))
            cells = {}
            for kind in types:
                row = summary[name][kind]
                cells[kind] = {**row["intervals"]["bcu"], "answered": row["n"], "errors": row["errors"],
                               "not_computed": row.get("not_computed", {}).get("bcu")}
            entries[name] = {"short": short, "label": label, "paper_name": paper_name, "bcu": cells,
                             "faithfulness": cub[name]["faithfulness"], "robustness": cub[name]["robustness"],
                             "intervals": cub[name]["intervals"]}
        points = {n: (entries[n]["faithfulness"], entries[n]["robustness"]) for n in techniques
                  if entries[n]["faithfulness"] is not None and entries[n]["robustness"] is not None}
        front = pareto_front(points)
        status = pareto_status({n: entries[n] for n in points}, front)
        scores = _bcu_by_question(compared, types, records)
        # a question is complete when every pipeline answered it under every context built for it (a context not
        # built, e.g. no conflicting substitute, has no answer of any pipeline)
        everyone = [*techniques, MEMORY]
        answered = [q for q in compared["run"]["question_ids"]
                    if all(len({n for n in everyone if q in scores[n][t]}) in (0, len(everyone)) for t in types)]
        run = compared["run"]
        return {
            "experiment": self.describe(),
            "questions": {"drawn": run["questions"], "complete": len(answered),
                          "incomplete": run["questions"] - len(answered),
                          "contexts_not_built": run["missing_contexts"]},
            "context_types": types,
            "techniques": entries,
            "pareto_front": front,
            "pareto_status": status,
            "paired": paired_against_regular(scores, techniques, types, settings.seed),
            "refused": refused,
            "paper": paper_points(),
            "statistics": {
                "cells": "BCU per technique and context type with its Wilson 95% interval, n = the questions "
                         "given that context and answered (compare's summary)",
                "faithfulness": "mean of BCU gold and BCU conflicting on the questions given both (the paired set; "
                                "n = those questions); 95% interval: BCa bootstrap resampling them jointly over the "
                                "two (compare's cub); robustness = BCU irrelevant (Wilson)",
                "paired": "each technique against regular decoding (vanilla_rag) on the questions both answered: "
                          "exact McNemar for BCU per context type, paired sign-flip permutation test for "
                          "faithfulness (values 0, 0.5, 1), paired bootstrap interval of the difference; Holm across "
                          "the techniques for each measure; MDE at alpha 0.05 / techniques, power 0.8",
                "pareto": "the front over the techniques (closed-book is the memory reference); off the front: "
                          "'dominated by X' when a front technique's interval lies wholly above on an axis, else "
                          "'within noise of X'",
                "seed": settings.seed,
                "paper": "the paper's figures are other models on other questions: shown beside, not tested",
            },
            "run": {
                "out": str(settings.out),
                "backend": run["backend"],
                "max_new_tokens": settings.max_new_tokens,
                "reuse_prompt_prefix": settings.reuse_prompt_prefix,
                "compare_max_new_tokens": run["max_new_tokens"],
                "limit": settings.limit,
                "registered_size": self.registered_size,
                "at_registered_size": (settings.at_registered_size(self.registered_size)
                                       and "techniques" not in settings.options),
                "conditions_asked": settings.conditions_asked,
                "techniques_asked": settings.options.get("techniques"),
                "pipelines": run["pipelines"],
                "compare_reports": {"answers": compared["files"]["html"]},
                "counters": run["counters"],
                "generation_seconds": run["generation_seconds"],
                "question_ids_file": run["question_ids_file"],
                "dataset": run["dataset"],
            },
        }

    # -- the report ------------------------------------------------------------------------------------------

    def tables(self, report: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
        return cub_tables(report)

    def plot(self, report: dict[str, Any], path: Path) -> Path:
        return plot_cub(report, path)


def _interval(value: dict | None) -> str:
    if not value or value.get("mean") is None:
        return "-"
    if value.get("ci95") is None:
        return f"{value['mean']:.3f} (n {value['n']})"
    low, high = value["ci95"]
    return f"{value['mean']:.3f} [{low:.2f}, {high:.2f}] n {value['n']}"


def _difference(row: dict) -> str:
    difference = row["difference"]
    if difference.get("ci95") is None:
        return f"{difference['mean']:+.3f}"
    low, high = difference["ci95"]
    return f"{difference['mean']:+.3f} [{low:+.2f}, {high:+.2f}]"


def cub_tables(report: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """The report's tables: BCU and faithfulness/robustness per technique, the paired comparisons with regular
    decoding, the paper's Table 3 beside the same techniques of yours, the refusals."""
    types = report["context_types"]
    entries = report["techniques"]
    header = ["technique", "pipeline", *[f"BCU {t} [95% CI] n" for t in types], "faithfulness [95% CI]",
              "robustness [95% CI]", "Pareto (yours)"]
    rows = []
    for name, entry in entries.items():
        status = report["pareto_status"].get(name, "reference (memory target)" if name == MEMORY else "-")
        rows.append([entry["short"], name, *[_interval(entry["bcu"][t]) for t in types],
                     _interval(entry["intervals"]["faithfulness"]), _interval(entry["intervals"]["robustness"]),
                     status])
    n = report["questions"]
    out = [("BCU per technique and context type",
            f"Yours: {n['drawn']} question(s) drawn, {n['complete']} answered by every technique under every context "
            f"built (contexts not built: {n['contexts_not_built'] or 'none'}); Wilson 95% intervals for BCU, a "
            "bootstrap over questions for faithfulness. Pareto front over the techniques: "
            f"{', '.join(report['pareto_front']) or 'none'}. Closed-book is robust by construction (its answer is "
            "the memory target).", header, rows)]
    paired = [[entries[r["technique"]]["short"], r["measure"], str(r["n"]), _difference(r),
               (f"{r['only_pipeline']} / {r['only_baseline']}" if "only_pipeline" in r else "-"), r["test"],
               f"{r['p_value']:.3g}", f"{r['p_holm']:.3g}", r["verdict"]] for r in report["paired"]]
    out.append(("each technique against regular decoding (paired, same questions)",
                "technique minus regular decoding (vanilla_rag); robustness is BCU irrelevant. Holm across the "
                "techniques for each measure.",
                ["technique", "measure", "n", "difference [95% CI]", "only technique / only regular", "test", "p",
                 "p (Holm)", "verdict"], paired))
    by_paper_name = {e["paper_name"]: e for e in entries.values() if e["paper_name"]}
    paper_rows = []
    for point in report["paper"]:
        mine = by_paper_name.get(point["technique"])
        paper_rows.append([point["dataset"], point["model"], point["technique"],
                           f"{point['faithfulness']:.4f}", f"{point['robustness']:.4f}",
                           _interval(mine["intervals"]["faithfulness"]) if mine else "not run here",
                           _interval(mine["intervals"]["robustness"]) if mine else "not run here", point["source"]])
    out.append(("the paper's Pareto points beside yours",
                f"Paper: {report['experiment']['paper']}; as printed (percent / 100), other models on other "
                "questions: shown beside, not tested. Yours: the same technique on your model (NQ sample).",
                ["dataset", "model (paper)", "technique", "faithfulness (paper)", "robustness (paper)",
                 "faithfulness (yours, NQ)", "robustness (yours, NQ)", "source"], paper_rows))
    if report.get("refused"):
        out.append(("techniques refused", "not run, with the reason (the backend cannot give what they need).",
                    ["technique", "pipeline", "reason"],
                    [[r["technique"], r["pipeline"], r["reason"]] for r in report["refused"]]))
    return out


def _bar(value: float | None, interval: dict | None) -> list[list[float]] | None:
    if value is None or not interval or interval.get("ci95") is None:
        return None
    low, high = interval["ci95"]
    return [[max(0.0, value - low)], [max(0.0, high - value)]]


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")


def _draw_yours(axes, report: dict[str, Any], colours, with_reference: bool) -> None:
    """Your techniques as points with 95% error bars, the Pareto front joined, closed-book if ``with_reference``."""
    entries = report["techniques"]
    for index, (name, entry) in enumerate(entries.items()):
        x, y = entry["faithfulness"], entry["robustness"]
        reference = name == MEMORY
        if x is None or y is None or (reference and not with_reference):
            continue
        colour = "grey" if reference else colours[index % len(colours)]
        xerr = _bar(x, entry["intervals"].get("faithfulness"))
        yerr = _bar(y, entry["intervals"].get("robustness"))
        if xerr or yerr:
            axes.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="none", ecolor=colour, elinewidth=1, capsize=3,
                          alpha=0.6)
        front = "  *front" if name in report["pareto_front"] else ""
        axes.scatter([x], [y], s=70, marker=_MARKERS[index % len(_MARKERS)], facecolors="none", edgecolors=[colour],
                     linewidths=1.8, zorder=3,
                     label=(f"closed-book (memory reference)  (F {x:.2f}, R {y:.2f})" if reference
                            else f"{entry['short']}  (F {x:.2f}, R {y:.2f}){front}"))
    front_points = sorted((entries[n]["faithfulness"], entries[n]["robustness"]) for n in report["pareto_front"])
    if len(front_points) > 1:
        axes.plot([p[0] for p in front_points], [p[1] for p in front_points], "--", color="crimson", linewidth=1.2,
                  label="Pareto front (yours)")


def _techniques_extent(report: dict[str, Any]) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The x and y limits that hold every technique's point and 95% interval (closed-book left out), with a margin;
    None when no technique has a point."""
    xs, ys = [], []
    for name, entry in report["techniques"].items():
        if name == MEMORY or entry["faithfulness"] is None or entry["robustness"] is None:
            continue
        for key, values in (("faithfulness", xs), ("robustness", ys)):
            values.append(entry[key])
            interval = (entry["intervals"].get(key) or {}).get("ci95")
            if interval:
                values.extend(interval)
    if not xs:
        return None

    def padded(values: list[float]) -> tuple[float, float]:
        low, high = min(values), max(values)
        margin = max(0.02, 0.08 * (high - low))
        return low - margin, high + margin

    return padded(xs), padded(ys)


def plot_cub(report: dict[str, Any], path: str | Path) -> Path:
    """Three panels, faithfulness (x) against robustness (y): yours on the whole square, one point per technique
    with its 95% intervals as error bars, the Pareto front joined and closed-book as the reference; yours again,
    zoomed to the techniques' points and intervals, so that a front close to the axes can be read; and the paper's
    Table 3 points, each named with its model and technique, one colour per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from icr2_components.plotting import save_figure

    figure, (mine, zoomed, theirs) = plt.subplots(1, 3, figsize=(17, 5.8))
    colours = plt.get_cmap("tab10").colors
    _draw_yours(mine, report, colours, with_reference=True)
    mine.set_title(f"yours: {report['run']['backend']}, n = {report['questions']['drawn']} NQ questions\n"
                   "error bars: 95% intervals", fontsize=9)
    datasets = list(dict.fromkeys(p["dataset"] for p in report["paper"]))
    for index, dataset in enumerate(datasets):
        points = [p for p in report["paper"] if p["dataset"] == dataset]
        colour = colours[(index + 3) % len(colours)]
        ordered = sorted((p["faithfulness"], p["robustness"]) for p in points)
        theirs.plot([p[0] for p in ordered], [p[1] for p in ordered], "--", color=colour, linewidth=1)
        for number, p in enumerate(points):  # named in the legend: labels beside the points would overlap
            theirs.scatter([p["faithfulness"]], [p["robustness"]], color=colour, s=50,
                           marker=_MARKERS[number % len(_MARKERS)], zorder=3,
                           label=f"{dataset}: {p['model']}, {p['technique']} "
                                 f"(F {p['faithfulness']:.2f}, R {p['robustness']:.2f})")
    theirs.set_title("the paper's Table 3: Pareto points per dataset (other models)", fontsize=9)
    for axes in (mine, theirs):
        axes.set(xlim=(-0.05, 1.05), ylim=(-0.05, 1.05))
        axes.set_aspect("equal")
        axes.legend(loc="upper left", bbox_to_anchor=(0.0, -0.2), fontsize=7)
    extent = _techniques_extent(report)
    if extent is not None:
        _draw_yours(zoomed, report, colours, with_reference=False)
        zoomed.set(xlim=extent[0], ylim=extent[1])
        zoomed.set_title("yours, zoomed to the techniques (closed-book left out)\nthe same points, bars and front",
                         fontsize=9)
    else:
        zoomed.set_axis_off()
    for axes in (mine, zoomed, theirs):
        axes.set(xlabel="faithfulness = avg(BCU gold, BCU conflicting)", ylabel="robustness = BCU irrelevant")
        axes.grid(alpha=0.3)
    figure.suptitle("CUB: faithfulness against robustness per context-utilisation technique", fontsize=10)
    return save_figure(figure, path, tight=True)


__all__ = [
    "CONTEXT_TYPES",
    "TECHNIQUES",
    "ContextUtilisationBenchmark",
    "cub_tables",
    "paired_against_regular",
    "paper_points",
    "plot_cub",
    "registered_question_ids",
]
