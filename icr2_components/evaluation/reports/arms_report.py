"""Arms of a registered experiment, each a (pipeline, context type) answered by ``icr2 compare``, compared on the
questions they all answered: answer match and exact match with Wilson intervals, exact McNemar against each
reference with Holm within each family, and a pre-registered "beats every reference by at least a margin" claim.

``icr2 compare`` pairs pipelines within one context type; an experiment such as ICR2's Table 3 compares a reader on
the corpus in context with closed-book (no passages) and vanilla RAG (its own retrieval), so its arms live in
different context types (and different compare runs). This module reads their answer caches and pairs by question.

Usage:
    >>> arms = {"untrained": load_arm("runs/arms/untrained/answers.jsonl", "corpus"), ...}
    >>> report = arms_report(arms, references=["vanilla_rag", "untrained"], claim_arms=["sft_da"])
    >>> print(arms_markdown(report))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from icr2_components.evaluation.compare.cache import read_answer_records
from icr2_components.evaluation.metrics.answer_match import answer_match
from icr2_components.evaluation.metrics.text_metrics import short_answer_exact_match
from icr2_components.evaluation.statistics.paired_comparison import holm
from icr2_components.evaluation.statistics.proportions import exact_mcnemar, wilson_interval

ALPHA = 0.05


def load_arm(answers_file: str | Path, context_type: str, pipeline: str | None = None) -> dict[str, dict]:
    """question id -> answer record of one arm (the records of ``context_type``, and ``pipeline`` if given; a
    record that failed is kept and scores 0, never dropped)."""
    records = {}
    for record in read_answer_records(answers_file):
        if record.get("context_type") != context_type or (pipeline and record.get("pipeline") != pipeline):
            continue
        records[record["question_id"]] = record
    return records


def _scores(record: dict) -> tuple[bool, bool]:
    answer = record.get("answer") or ""
    return answer_match(answer, record["answers"]), short_answer_exact_match(answer, record["answers"])


def _rate(values: Sequence[bool]) -> dict:
    n, k = len(values), int(sum(values))
    low, high = wilson_interval(k, n) if n else (None, None)
    return {"n": n, "successes": k, "rate": k / n if n else None, "ci95": [low, high]}


def _paired(a: Sequence[bool], b: Sequence[bool]) -> dict:
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    return {"difference": (sum(a) - sum(b)) / len(a) if a else None, "only_arm": only_a, "only_reference": only_b,
            "p": exact_mcnemar(only_a, only_b)}


def arms_report(arms: Mapping[str, Mapping[str, dict]], references: Sequence[str], claim_arms: Sequence[str],
                min_difference: float = 0.10, question_ids: Sequence[str] | None = None,
                pairs: Sequence[tuple[str, str]] = ()) -> dict:
    """Score every arm on the questions every present arm answered and test the claim.

    :param arms: arm name -> question id -> answer record (``load_arm``); an arm with no records is "not run".
    :param references: the arms every arm is compared with (each a family of its own for the secondary table;
        together with ``claim_arms`` the claim's family).
    :param claim_arms: the arms of the claim: it holds for an arm beating every reference by ``>= min_difference``
        answer match with Holm-adjusted p < 0.05 (Holm over claim_arms x references; an arm not run counts p = 1).
    :param question_ids: restrict to these (e.g. the registered evaluation ids).
    :param pairs: further registered (arm, baseline) comparisons (e.g. SFT-RTA against SFT-DA), one Holm family of
        the pairs whose two arms were run; a pair with an arm not run is listed with ``p`` None.
    :returns: ``{"n", "arms": {name: {answer_match, exact_match, vs: {reference: ...}}}, "pairs": [...],
        "claim": {...}}``.
    """
    present = {name: records for name, records in arms.items() if records}
    common = set.intersection(*(set(r) for r in present.values())) if present else set()
    if question_ids is not None:
        common &= set(question_ids)
    order = sorted(common) if question_ids is None else [q for q in question_ids if q in common]
    scores = {name: [_scores(records[q]) for q in order] for name, records in present.items()}
    out: dict = {"n": len(order), "arms": {}, "not_run": sorted(set(arms) - set(present))}
    for name, values in scores.items():
        matches, exacts = [m for m, _ in values], [e for _, e in values]
        row = {"answer_match": _rate(matches), "exact_match": _rate(exacts), "vs": {}}
        for reference in references:
            if reference in scores and reference != name:
                ref = scores[reference]
                row["vs"][reference] = {"answer_match": _paired(matches, [m for m, _ in ref]),
                                        "exact_match": _paired(exacts, [e for _, e in ref])}
        out["arms"][name] = row
    for reference in references:  # secondary: Holm within each reference's family (every other arm vs it)
        names = [n for n in out["arms"] if reference in out["arms"][n]["vs"]]
        for metric in ("answer_match", "exact_match"):
            adjusted = holm([out["arms"][n]["vs"][reference][metric]["p"] for n in names])
            for n, p in zip(names, adjusted, strict=True):
                out["arms"][n]["vs"][reference][metric]["p_holm_family"] = p
    out["pairs"] = []
    for arm, baseline in pairs:
        entry: dict = {"arm": arm, "baseline": baseline}
        if arm in scores and baseline in scores:
            for index, metric in enumerate(("answer_match", "exact_match")):
                entry[metric] = _paired([v[index] for v in scores[arm]], [v[index] for v in scores[baseline]])
        out["pairs"].append(entry)
    run_pairs = [entry for entry in out["pairs"] if "answer_match" in entry]
    for metric in ("answer_match", "exact_match"):
        for entry, p in zip(run_pairs, holm([entry[metric]["p"] for entry in run_pairs]), strict=True):
            entry[metric]["p_holm_family"] = p
    family = [(arm, ref) for arm in claim_arms for ref in references]
    raw = [out["arms"].get(arm, {}).get("vs", {}).get(ref, {}).get("answer_match", {}).get("p", 1.0)
           for arm, ref in family]
    adjusted = holm(raw) if family else []
    per_arm: dict = {}
    for (arm, ref), p in zip(family, adjusted, strict=True):
        test = out["arms"].get(arm, {}).get("vs", {}).get(ref, {}).get("answer_match")
        difference = test["difference"] if test else None
        holds = test is not None and difference is not None and difference >= min_difference and p < ALPHA
        per_arm.setdefault(arm, {})[ref] = {"difference": difference, "p_holm": p, "holds": holds}
    verdicts = {arm: all(v["holds"] for v in refs.values()) for arm, refs in per_arm.items()}
    out["claim"] = {"min_difference": min_difference, "alpha": ALPHA, "family_size": len(family),
                    "per_arm": per_arm, "arms_for_which_it_holds": [a for a, v in verdicts.items() if v],
                    "holds": any(verdicts.values()),
                    "complete": all(arm in present for arm in claim_arms) and all(r in present for r in references)}
    return out


def _selection_hits(records: Mapping[str, dict], contexts: Mapping[str, Sequence[str]],
                    question_ids: Sequence[str] | None) -> dict[str, tuple[bool, float]]:
    """Question id -> (the arm kept a gold passage, the chance that a random pick of as many would)."""
    from math import comb

    wanted = question_ids if question_ids is not None else sorted(records)
    hits = {}
    for question in (q for q in wanted if q in records and q in contexts):
        corpus, record = set(contexts[question]), records[question]
        shown = set(record.get("shown_ids") or [])
        if shown - corpus:
            raise ValueError(f"{question}: the arm showed passages not in its corpus: {sorted(shown - corpus)[:3]}.")
        gold = set(record.get("gold_ids") or []) & corpus
        n, kept, golds = len(corpus), len(shown), len(gold)
        hits[question] = (bool(gold & shown), 1 - comb(n - golds, kept) / comb(n, kept) if n else 0.0)
    return hits


def selection_recall(records: Mapping[str, dict], contexts: Mapping[str, Sequence[str]],
                     question_ids: Sequence[str] | None = None) -> dict:
    """How often an arm that selects passages of the corpus in context (a retrieval head, RAP) kept a gold
    passage, against chance: a uniformly random pick of as many passages from the same corpus.

    :param records: question id -> answer record of the selecting arm (``shown_ids``: the passages it kept).
    :param contexts: question id -> the passage ids of that question's corpus in context.
    :param question_ids: restrict to these (default: every question with a record and a context).
    :returns: ``{"n", "hits", "rate", "ci95", "chance", "p"}``: ``chance`` the mean chance hit probability,
        ``p`` the one-sided exact probability of at least ``hits`` under chance (Poisson-binomial over the questions'
        own chance probabilities, which differ with the number kept and of gold passages).
    :raises ValueError: a record shows a passage that is not in its question's corpus.
    """
    from scipy.stats import poisson_binom

    selected = _selection_hits(records, contexts, question_ids)
    hits = [hit for hit, _ in selected.values()]
    chances = [chance for _, chance in selected.values()]
    rate = _rate(hits)
    p = float(poisson_binom(chances).sf(rate["successes"] - 1)) if selected else None
    return {**rate, "hits": rate["successes"], "chance": sum(chances) / len(chances) if chances else None, "p": p}


def selection_after_before(after: Mapping[str, dict], before: Mapping[str, dict],
                           contexts: Mapping[str, Sequence[str]], question_ids: Sequence[str] | None = None) -> dict:
    """The heads' hit rate after fine-tuning against before (ICR2 figure 4), paired on the questions both answered.

    :param after: question id -> answer record of the arm whose heads were probed on the fine-tuned reader.
    :param before: the same for heads probed on the untrained reader.
    :param contexts: question id -> the passage ids of that question's corpus in context.
    :param question_ids: restrict to these (default: every question both arms answered).
    :returns: ``{"n", "after", "before", "difference", "only_arm", "only_reference", "p"}``: ``after``/``before``
        rates with Wilson intervals; ``p`` the exact McNemar test on the per-question "kept a gold passage".
    :raises ValueError: a record shows a passage that is not in its question's corpus.
    """
    hits_after = _selection_hits(after, contexts, question_ids)
    hits_before = _selection_hits(before, contexts, question_ids)
    both = [q for q in hits_after if q in hits_before]
    a, b = [hits_after[q][0] for q in both], [hits_before[q][0] for q in both]
    return {"n": len(both), "after": _rate(a), "before": _rate(b), **_paired(a, b)}


def _fmt_rate(rate: dict) -> str:
    low, high = rate["ci95"]
    return f"{rate['rate']:.3f} ({low:.2f}-{high:.2f})" if rate["rate"] is not None else "-"


def arms_markdown(report: dict, references: Sequence[str]) -> str:
    """The table: one row per arm, answer match and EM with intervals, and the paired test against each reference."""
    header = ["arm", "n", "answer match (95% Wilson)", "exact match (95% Wilson)"]
    for reference in references:
        header += [f"vs {reference}: diff", "only arm / only ref", "McNemar p", "Holm p"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, row in report["arms"].items():
        cells = [name, str(row["answer_match"]["n"]), _fmt_rate(row["answer_match"]), _fmt_rate(row["exact_match"])]
        for reference in references:
            test = row["vs"].get(reference, {}).get("answer_match")
            if test is None:
                cells += ["", "", "", ""]
                continue
            cells += [
                f"{test['difference']:+.3f}",
                f"{test['only_arm']} / {test['only_reference']}",
                f"{test['p']:.2g}",
                f"{test['p_holm_family']:.2g}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    if report["not_run"]:
        lines.append(f"\nNot run yet: {', '.join(report['not_run'])}.")
    if report.get("pairs"):
        lines += ["", "| comparison | answer match diff | only arm / only baseline | McNemar p | Holm p (pairs run) "
                  "| exact match diff | McNemar p |", "|---|---|---|---|---|---|---|"]
        for entry in report["pairs"]:
            label = f"{entry['arm']} vs {entry['baseline']}"
            if "answer_match" not in entry:
                lines.append(f"| {label} | not run | | | | | |")
                continue
            am, em = entry["answer_match"], entry["exact_match"]
            lines.append(f"| {label} | {am['difference']:+.3f} | {am['only_arm']} / {am['only_reference']} | "
                         f"{am['p']:.2g} | {am['p_holm_family']:.2g} | {em['difference']:+.3f} | {em['p']:.2g} |")
    return "\n".join(lines)
