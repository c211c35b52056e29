"""The online A/B log of ``icr2 serve --ab`` and its comparison (``icr2 compare --ab-log PATH``).

The log is JSON Lines, append-only, one record per answered request of the A/B model, written and fsynced before
the answer's last byte is sent (``serving.ab_split.ABLog``), so a request whose client got its 200 is in the log
even if the server is killed right after. Each record: ``time``, ``request_id``, ``model`` (the A/B model name),
``arm`` (the pipeline that answered), ``user`` (a hash of the user id, or null), ``status``, ``latency_ms``,
``prompt_tokens``, ``completion_tokens``, ``query``, ``answer``, ``passages`` (id, score, content).

A kill can leave a torn last line (a record cut mid-write, whose client never got its answer): the server cuts it
when it opens the log again (``repair_torn_tail``) and the reader skips one still there; both count it.

The comparison is UNPAIRED: each request went to one arm, so the arms answer different questions from (by the
sticky hash) different users. It reports per arm the mean with its 95% interval (``mean_interval``: Wilson for 0/1,
BCa bootstrap otherwise) and between arms the difference of means with Welch's interval and test, plus the
Mann-Whitney U test (latency and token counts are skewed); answer match (given a label file of gold answers by
request id or by query) with Wilson intervals per arm, Newcombe's interval for the difference and the two-proportion
z test. It can say whether the arms' traffic differed in latency, tokens or measured correctness; it cannot say
that one pipeline is better on the same question (no pairing), and a split by user confounds the arm with whatever
differs between the users given each arm.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from icr2_components.errors import UserInputError

AB_METRICS = ("latency_ms", "prompt_tokens", "completion_tokens")


def repair_torn_tail(path: str | os.PathLike) -> int:
    """Cut a torn last line (bytes after the last newline, a record a kill interrupted) from the log at ``path``.

    :returns: 1 when a torn line was cut, else 0 (no file, an empty one or a whole last line).
    """
    path = Path(path)
    if not path.exists():
        return 0
    with open(path, "rb+") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        if size == 0:
            return 0
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        # find the last newline, reading back in blocks
        position, block = size, 65536
        cut = 0
        while position > 0:
            start = max(0, position - block)
            handle.seek(start)
            data = handle.read(position - start)
            index = data.rfind(b"\n")
            if index >= 0:
                cut = start + index + 1
                break
            position = start
        handle.truncate(cut)
        handle.flush()
        os.fsync(handle.fileno())
    return 1


def read_ab_log(path: str | os.PathLike) -> tuple[list[dict[str, Any]], int]:
    """The records of the A/B log at ``path`` and how many torn lines were skipped (a last line without its newline,
    or one that is not a JSON object).

    :raises UserInputError: the file does not exist or is not readable.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserInputError(f"--ab-log {path}: cannot read it ({error.strerror}); give the file icr2 serve --ab-log "
                             "wrote.") from error
    records, torn = [], 0
    lines = data.split(b"\n")
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        last_unterminated = index == len(lines) - 1
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            torn += 1
            continue
        if last_unterminated or not isinstance(record, dict) or "arm" not in record:
            torn += 1
            continue
        records.append(record)
    return records, torn


def read_labels(path: str | os.PathLike) -> dict[str, list[str]]:
    """Gold answers for the logged requests: a JSONL file of ``{"request_id" or "query": ..., "answers": [...]}``.

    :returns: key -> gold answers, keyed ``id:<request_id>`` and ``q:<query>``.
    :raises UserInputError: the file is unreadable or a line is not such an object.
    """
    labels: dict[str, list[str]] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UserInputError(f"--labels {path}: cannot read it ({error.strerror}).") from error
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as error:
            raise UserInputError(f"--labels {path} line {number}: not JSON ({error}).") from error
        answers = entry.get("answers") if isinstance(entry, dict) else None
        if isinstance(answers, str):
            answers = [answers]
        if not isinstance(answers, list) or not (entry.get("request_id") or entry.get("query")):
            raise UserInputError(f"--labels {path} line {number}: give {{\"request_id\" or \"query\": ..., "
                                 "\"answers\": [...]}.")
        if entry.get("request_id"):
            labels[f"id:{entry['request_id']}"] = [str(a) for a in answers]
        if entry.get("query"):
            labels[f"q:{entry['query']}"] = [str(a) for a in answers]
    return labels


def _unpaired(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Difference of means b - a with Welch's 95% interval and test, and the Mann-Whitney U test's p."""
    from scipy import stats

    result: dict[str, Any] = {"difference": None, "ci95": None, "welch_p": None, "mann_whitney_p": None,
                              "method": "welch"}
    if len(a) < 2 or len(b) < 2:
        return result
    a_arr, b_arr = [float(x) for x in a], [float(x) for x in b]
    mean_a, mean_b = sum(a_arr) / len(a_arr), sum(b_arr) / len(b_arr)
    result["difference"] = mean_b - mean_a
    var_a = stats.tvar(a_arr) / len(a_arr) if len(set(a_arr)) > 1 else 0.0
    var_b = stats.tvar(b_arr) / len(b_arr) if len(set(b_arr)) > 1 else 0.0
    se = math.sqrt(var_a + var_b)
    if se > 0:
        dof = (var_a + var_b) ** 2 / ((var_a ** 2 / (len(a_arr) - 1) if var_a else 0.0)
                                      + (var_b ** 2 / (len(b_arr) - 1) if var_b else 0.0))
        half = stats.t.ppf(0.975, dof) * se
        result["ci95"] = [result["difference"] - half, result["difference"] + half]
        result["welch_p"] = float(stats.ttest_ind(b_arr, a_arr, equal_var=False).pvalue)
    else:
        result["ci95"] = [result["difference"], result["difference"]]
    if len(set(a_arr) | set(b_arr)) > 1:
        result["mann_whitney_p"] = float(stats.mannwhitneyu(b_arr, a_arr, alternative="two-sided").pvalue)
    return result


def _proportions(a: Sequence[int], b: Sequence[int]) -> dict[str, Any]:
    """Difference of proportions b - a with Newcombe's 95% interval and the two-proportion z test's p."""
    from statsmodels.stats.proportion import confint_proportions_2indep, proportions_ztest

    result: dict[str, Any] = {"difference": None, "ci95": None, "p": None, "method": "newcombe; two-proportion z"}
    if not a or not b:
        return result
    count_a, count_b = sum(a), sum(b)
    result["difference"] = count_b / len(b) - count_a / len(a)
    low, high = confint_proportions_2indep(count_b, len(b), count_a, len(a), method="newcomb", compare="diff")
    result["ci95"] = [float(low), float(high)]
    if 0 < count_a + count_b < len(a) + len(b):
        result["p"] = float(proportions_ztest([count_b, count_a], [len(b), len(a)])[1])
    return result


def compare_ab_log(path: str | os.PathLike, labels: str | os.PathLike | None = None,
                   baseline: str | None = None, seed: int = 0) -> dict[str, Any]:
    """The report of an A/B log: per arm the requests and each metric's mean with its 95% interval, and each other
    arm against ``baseline`` (default: the arm with the most requests) unpaired (module docstring).

    :raises UserInputError: the log holds no record, or ``baseline`` is not one of its arms.
    """
    from icr2_components.evaluation.metrics.answer_match import answer_match
    from icr2_components.evaluation.statistics.intervals import mean_interval

    records, torn = read_ab_log(path)
    answered = [r for r in records if r.get("status") == 200]
    if not answered:
        raise UserInputError(f"--ab-log {path}: no answered request in it ({len(records)} records, {torn} torn); "
                             "serve with --ab and send requests to the A/B model first.")
    arms: dict[str, list[dict[str, Any]]] = {}
    for record in answered:
        arms.setdefault(str(record["arm"]), []).append(record)
    if baseline is None:
        baseline = max(arms, key=lambda arm: len(arms[arm]))
    elif baseline not in arms:
        raise UserInputError(f"--baseline {baseline!r} is not an arm of {path}; its arms are {sorted(arms)}.")
    gold = read_labels(labels) if labels else {}

    def matches(arm_records: list[dict[str, Any]]) -> list[int]:
        scores = []
        for record in arm_records:
            answers = gold.get(f"id:{record.get('request_id')}") or gold.get(f"q:{record.get('query')}")
            if answers and isinstance(record.get("answer"), str):
                scores.append(int(answer_match(record["answer"], answers)))
        return scores

    metrics = list(AB_METRICS) + (["answer_match"] if gold else [])
    report: dict[str, Any] = {"log": str(path), "records": len(records), "answered": len(answered),
                              "torn_lines_skipped": torn, "baseline": baseline, "paired": False, "arms": {},
                              "comparisons": {}}
    values: dict[str, dict[str, list[float]]] = {}
    for arm, arm_records in sorted(arms.items()):
        values[arm] = {metric: [float(r[metric]) for r in arm_records if isinstance(r.get(metric), int | float)]
                       for metric in AB_METRICS}
        if gold:
            values[arm]["answer_match"] = matches(arm_records)
        report["arms"][arm] = {"requests": len(arm_records),
                               "users": len({r.get("user") for r in arm_records if r.get("user")}),
                               **{metric: mean_interval(values[arm][metric], seed=seed) for metric in metrics}}
    for arm in sorted(arms):
        if arm == baseline:
            continue
        report["comparisons"][f"{arm} vs {baseline}"] = {
            **{metric: _unpaired(values[baseline][metric], values[arm][metric]) for metric in AB_METRICS},
            **({"answer_match": _proportions(values[baseline]["answer_match"], values[arm]["answer_match"])}
               if gold else {})}
    return report


def format_ab_report(report: dict[str, Any]) -> str:
    """The report as a table for the terminal."""

    def interval(entry: dict[str, Any]) -> str:
        if entry.get("mean") is None:
            return "n/a"
        low, high = entry.get("ci95") or (None, None)
        return f"{entry['mean']:.3g} [{low:.3g}, {high:.3g}]" if low is not None else f"{entry['mean']:.3g}"

    metrics = [m for m in (*AB_METRICS, "answer_match") if any(m in arm for arm in report["arms"].values())]
    lines = [f"A/B log {report['log']}: {report['answered']} answered requests ({report['torn_lines_skipped']} torn "
             f"lines skipped); arms are UNPAIRED (different requests): Welch and Mann-Whitney tests, Wilson/Newcombe "
             "for answer match", "arm | requests | " + " | ".join(f"{m} (95% CI)" for m in metrics)]
    for arm, entry in report["arms"].items():
        lines.append(f"{arm} | {entry['requests']} | " + " | ".join(interval(entry[m]) for m in metrics))
    for name, comparison in report["comparisons"].items():
        parts = []
        for metric, result in comparison.items():
            if result.get("difference") is None:
                parts.append(f"{metric}: n/a")
                continue
            low, high = result["ci95"]
            p = result.get("welch_p", result.get("p"))
            parts.append(f"{metric}: {result['difference']:+.3g} [{low:+.3g}, {high:+.3g}]"
                         + (f" p={p:.3g}" if p is not None else "")
                         + (f" MW p={result['mann_whitney_p']:.3g}" if result.get("mann_whitney_p") is not None
                            else ""))
        lines.append(f"{name}: " + "; ".join(parts))
    return "\n".join(lines)


__all__ = ["compare_ab_log", "format_ab_report", "read_ab_log", "repair_torn_tail"]
