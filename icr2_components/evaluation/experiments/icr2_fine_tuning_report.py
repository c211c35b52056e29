"""The tables and the plot of ``icr2 reproduce icr2-fine-tuning``: each arm's answer match and exact match with
their Wilson intervals, its paired tests against vanilla RAG and the untrained reader, ICR2 Table 3's figure
(Mistral-7B) beside it; the registered pairs; the claim; the arms not run, with the reason.

Usage example:
```python
import json
from icr2_components.evaluation.experiments.icr2_fine_tuning_report import fine_tuning_tables, plot_fine_tuning

report = json.load(open("runs/reproduce/icr2-fine-tuning/report.json"))
for title, note, header, rows in fine_tuning_tables(report):
    print(title, header, rows[0])
plot_fine_tuning(report, "arms.png")
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from icr2_components.evaluation.experiments.icr2_fine_tuning_arms import PAPER_MODEL, REFERENCES


def _rate(rate: dict) -> str:
    if rate.get("rate") is None:
        return "n = 0"
    low, high = rate["ci95"]
    return f"{rate['rate']:.3f} [{low:.2f}-{high:.2f}]"


def _versus(test: dict | None) -> list[str]:
    if test is None:
        return ["", "", "", ""]
    return [f"{test['difference']:+.3f}", f"{test['only_arm']} / {test['only_reference']}", f"{test['p']:.2g}",
            f"{test['p_holm_family']:.2g}"]


def fine_tuning_tables(report: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """``(title, note, header, rows)`` of every table of the report, in order."""
    header = ["arm", "ICR2 Table 3 row", "n", "answer match [95% CI]", "exact match [95% CI]"]
    for reference in REFERENCES:
        header += [f"vs {reference}: diff", "only arm / only ref", "McNemar p", "Holm p"]
    header.append(f"{PAPER_MODEL} (paper)")
    rows = []
    for name, arm in report["arms"].items():
        rows.append([name, arm["label"], str(arm["answer_match"]["n"]), _rate(arm["answer_match"]),
                     _rate(arm["exact_match"]),
                     *[cell for reference in REFERENCES
                       for cell in _versus(arm["vs"].get(reference, {}).get("answer_match"))],
                     "" if arm["paper"] is None else f"{arm['paper']:.2f}"])
    experiment = report["experiment"]
    out = [("the arms beside ICR2 Table 3",
            f"Yours: n = {report['n']} questions answered by every arm run (Wilson 95% intervals); each arm against "
            "vanilla RAG and against the untrained reader on the same questions: answer match difference, questions "
            "right only with the arm / only with the reference, exact McNemar p, Holm within each reference's "
            f"family. Paper: {experiment['paper']}, {PAPER_MODEL} on ICR2 NQ, as printed (another model, other "
            "questions: not tested against); an empty cell: no such row in Table 3.", header, rows)]
    pairs = []
    for entry in report["pairs"]:
        label = f"{entry['arm']} vs {entry['baseline']}"
        if "answer_match" not in entry:
            pairs.append([label, "not run", "", "", "", "", ""])
            continue
        am, em = entry["answer_match"], entry["exact_match"]
        pairs.append([label, f"{am['difference']:+.3f}", f"{am['only_arm']} / {am['only_reference']}",
                      f"{am['p']:.2g}", f"{am['p_holm_family']:.2g}", f"{em['difference']:+.3f}", f"{em['p']:.2g}"])
    out.append(("the registered pairs (paired, same questions)",
                "ICR2 5.1's readers against SFT-DA, each RAP arm against its reader, SFT-DA against its gold-only "
                "ablation: exact McNemar, Holm over the pairs run.",
                ["comparison", "answer match diff", "only arm / only baseline", "McNemar p", "Holm p",
                 "exact match diff", "McNemar p (exact match)"], pairs))
    claim = report["claim"]
    claim_rows = [[arm, reference, "" if v["difference"] is None else f"{v['difference']:+.3f}",
                   f"{v['p_holm']:.2g}", "yes" if v["holds"] else "no"]
                  for arm, references in claim["per_arm"].items() for reference, v in references.items()]
    verdict = (f"HOLDS for {', '.join(claim['arms_for_which_it_holds'])}" if claim["holds"] else "does not hold")
    out.append((f"the registered claim: {verdict}",
                f"An arm beats both references by >= {claim['min_difference']} answer match with Holm p < "
                f"{claim['alpha']} (family of {claim['family_size']}; an arm not run counts p = 1"
                f"{'' if claim['complete'] else ': INCOMPLETE, some arms were not run'}).",
                ["arm", "reference", "difference", "Holm p", "holds"], claim_rows))
    if report.get("not_run"):
        out.append(("arms not run", "with the reason.", ["arm", "reason"],
                    [[r["arm"], r["reason"]] for r in report["not_run"]]))
    return out


def plot_fine_tuning(report: dict[str, Any], path: str | Path) -> Path:
    """Answer match per arm with its 95% Wilson interval, ICR2 Table 3's figure (Mistral-7B) beside each row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from icr2_components.plotting import save_figure

    names = list(report["arms"])
    rates = [report["arms"][n]["answer_match"] for n in names]
    values = [r["rate"] or 0.0 for r in rates]
    errors = [[(r["rate"] or 0.0) - (r["ci95"][0] or 0.0) for r in rates],
              [(r["ci95"][1] or 0.0) - (r["rate"] or 0.0) for r in rates]]
    figure, axis = plt.subplots(figsize=(max(6.0, 0.9 * len(names) + 2), 4.6))
    positions = list(range(len(names)))
    axis.bar([p - 0.2 for p in positions], values, width=0.4, yerr=errors, capsize=3, color="tab:blue",
             label=f"yours ({report['run']['backend']}), n = {report['n']}, 95% Wilson")
    paper = [(p + 0.2, report["arms"][n]["paper"]) for p, n in zip(positions, names, strict=True)
             if report["arms"][n]["paper"] is not None]
    if paper:
        axis.bar([x for x, _ in paper], [v for _, v in paper], width=0.4, color="tab:orange", alpha=0.8,
                 label=f"ICR2 Table 3, {PAPER_MODEL} (ICR2 NQ)")
    axis.set_xticks(positions)
    axis.set_xticklabels(names, rotation=30, ha="right")
    axis.set(ylim=(0, 1), ylabel="answer match")
    axis.set_title("ICR2 Table 3: the fine-tuning arms, yours beside the paper's", fontsize=10)
    axis.grid(axis="y", alpha=0.3)
    axis.legend(fontsize=8, loc="upper left")
    return save_figure(figure, path)


__all__ = ["fine_tuning_tables", "plot_fine_tuning"]
