"""``icr2 compare`` end to end: with the real SmolLM2, the report's numbers recomputed from the saved answers (and
a re-run answered wholly from the cache); a run killed with SIGKILL mid-run and resumed gives the same answers and
report as one never interrupted, a plumbing test of the answer cache and the report on ``tiny-random-mistral`` (the
shipped pipelines with only their reader's model swapped: random weights, answers that mean nothing, seconds a run).
"""

import functools
import gzip
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import AnswerCache, cache_lines, read_answer_records
from icr2_components.evaluation.metrics.bcu import bcu
from icr2_components.evaluation.metrics.text_metrics import answer_scores, in_context_recall
from icr2_components.evaluation.reports.position_curves import BUCKET_LABELS, first_gold_position, position_bucket
from icr2_components.evaluation.statistics.proportions import wilson_interval
from icr2_components.readers.context_aware_decoding_reader import ContextAwareDecodingReader
from icr2_components.readers.local_chat_reader import LocalChatReader
from icr2_components.text.normalization import normalize_answer

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = ["pipelines/closed_book.yaml", "pipelines/vanilla_rag.yaml", "pipelines/oracle.yaml"]


@pytest.fixture
def count_calls(monkeypatch):
    """Counts LocalChatReader.run calls."""
    state = {"calls": 0}
    original = LocalChatReader.run

    @functools.wraps(original)  # Haystack reads the sockets from run's signature
    def counting(self, *args, **kwargs):
        state["calls"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LocalChatReader, "run", counting)
    return state


def test_compare_10_questions_three_pipelines_report_matches_saved_answers(tmp_path, smollm2, count_calls, capsys):
    out = tmp_path / "run"
    code = main(["compare", "--pipelines", *PIPELINES, "--limit", "10", "--context-types", "open",
                 "--max-new-tokens", "6", "--out", str(out), "--no-progress"])
    assert code == 0
    assert count_calls["calls"] == 30
    report = json.loads((out / "report.json").read_text())
    records = read_answer_records(out / "answers.jsonl")
    assert len(records) == 30 and len({r["question_id"] for r in records}) == 10
    for pipeline in ("closed_book", "vanilla_rag", "oracle"):
        mine = [r for r in records if r["pipeline"] == pipeline]
        row = report["summary"][pipeline]["open"]
        assert row["n"] == 10
        for metric in ("exact_match", "answer_match", "token_f1", "rouge_l"):
            expected = statistics.fmean(answer_scores(r["answer"], r["answers"])[metric] for r in mine)
            assert row[metric] == pytest.approx(expected)
        assert row["latency_s"] == pytest.approx(statistics.fmean(r["latency_s"] for r in mine))
        assert row["prompt_tokens"] == pytest.approx(statistics.fmean(r["prompt_tokens"] for r in mine))
    # only the retrieving pipeline selects passages; its recall is over the gold passages it put in the prompt
    rag = [r for r in records if r["pipeline"] == "vanilla_rag"]
    expected_recall = statistics.fmean(in_context_recall(r["shown_ids"], r["gold_ids"]) for r in rag if r["gold_ids"])
    assert report["summary"]["vanilla_rag"]["open"]["in_context_recall"] == pytest.approx(expected_recall)
    assert report["summary"]["oracle"]["open"]["in_context_recall"] is None
    # the oracle was given exactly the gold passages; closed-book none
    assert all(r["prompt_tokens"] > 0 for r in records)
    oracle_tokens = statistics.fmean(r["prompt_tokens"] for r in records if r["pipeline"] == "oracle")
    closed_tokens = statistics.fmean(r["prompt_tokens"] for r in records if r["pipeline"] == "closed_book")
    assert oracle_tokens > closed_tokens + 50
    for name in ("report.md", "report.html", "context_types.png", "position_curves.png", "explore.html"):
        assert (out / name).stat().st_size > 0
    assert "vanilla_rag" in (out / "report.md").read_text()
    assert "faithfulness" in capsys.readouterr().out
    check_position_curves(report, records)
    check_external_metrics(report, records)
    check_hand_worked_report(out, records, count_calls)


def check_hand_worked_report(out, records, count_calls):
    """Replace the saved answers by hand-chosen ones (appended through the cache, each naming the record it
    replaces), re-run the same command (every answer cached: no model call) and compare the report with values
    worked out by hand."""
    by_question = {r["question_id"]: r["answers"] for r in records}
    assert (
        by_question["nq-sample-00000"][0] == "Wilhelm Conrad Röntgen"
        and by_question["nq-sample-00001"][0] == "May 18, 2018"
    )
    hand = {
        # closed_book: the gold answer verbatim for questions 0-1, a wrong word for the other 8
        "closed_book": lambda i, gold: gold if i < 2 else "zzz",
        # vanilla_rag: q0 contains the gold and 2 more words, q1 is 2 of the gold's 3 tokens, the rest wrong
        "vanilla_rag": lambda i, gold: {0: "Wilhelm Conrad Röntgen won it", 1: "May 18"}.get(i, "zzz"),
        # oracle: every answer is the gold answer verbatim
        "oracle": lambda i, gold: gold,
    }
    cache = AnswerCache(out / "answers.jsonl")
    for r in records:
        index = int(r["question_id"].rsplit("-", 1)[1])
        cache.add({**r, "answer": hand[r["pipeline"]](index, r["answers"][0])})
    count_calls["calls"] = 0
    assert main(["compare", "--pipelines", *PIPELINES, "--limit", "10", "--context-types", "open",
                 "--max-new-tokens", "6", "--out", str(out), "--no-progress"]) == 0
    assert count_calls["calls"] == 0
    summary = json.loads((out / "report.json").read_text())["summary"]
    closed, rag, oracle = (summary[p]["open"] for p in ("closed_book", "vanilla_rag", "oracle"))
    # closed_book: 2 of 10 exactly right, 8 with no common token
    assert (closed["exact_match"], closed["answer_match"], closed["token_f1"], closed["rouge_l"]) == pytest.approx(
        (0.2, 0.2, 0.2, 0.2))
    # vanilla_rag, q0: 3 common tokens of 5 predicted and 3 gold -> P 3/5, R 1, F1 = 2 * 0.6 / 1.6 = 0.75 (LCS 3:
    # ROUGE-L 0.75), the gold is contained (match 1), not equal (EM 0); q1: "may 18" against "may 18 2018" ->
    # P 1, R 2/3, F1 = 0.8, ROUGE-L 0.8, not contained. Means over 10: EM 0, match 1/10, F1 = ROUGE-L = 1.55 / 10.
    assert (rag["exact_match"], rag["answer_match"], rag["token_f1"], rag["rouge_l"]) == pytest.approx(
        (0.0, 0.1, 0.155, 0.155))
    assert (oracle["exact_match"], oracle["answer_match"], oracle["token_f1"], oracle["rouge_l"]) == pytest.approx(
        (1.0, 1.0, 1.0, 1.0))
    assert closed["n"] == rag["n"] == oracle["n"] == 10
    # answer match's Wilson 95% intervals (2/10, 1/10, 10/10) and the paired tests against closed-book: on the
    # same 10 questions the oracle alone is right on 8 (q2-q9) -> exact McNemar p = 2 / 2^8; vanilla is right
    # only on q0, where closed-book is right too; closed-book alone on q1 -> p = min(1, 2 / 2^1) = 1
    assert closed["answer_match_ci95"] == pytest.approx(list(wilson_interval(2, 10)))
    assert rag["answer_match_ci95"] == pytest.approx(list(wilson_interval(1, 10)))
    assert oracle["answer_match_ci95"] == pytest.approx([wilson_interval(10, 10)[0], 1.0])
    section = json.loads((out / "report.json").read_text())["paired"]
    assert section["baseline"] == "closed_book"  # the first pipeline given
    paired = {c["pipeline"]: c for c in section["comparisons"] if c["metric"] == "answer_match"}
    assert {k: paired["oracle"][k] for k in ("n", "both", "only_pipeline", "only_baseline", "neither")} == {
        "n": 10, "both": 2, "only_pipeline": 8, "only_baseline": 0, "neither": 0}
    assert paired["oracle"]["p_value"] == pytest.approx(2 / 2**8)
    vanilla = paired["vanilla_rag"]
    assert (vanilla["both"], vanilla["only_pipeline"], vanilla["only_baseline"]) == (1, 0, 1)
    assert vanilla["p_value"] == pytest.approx(1.0)
    # Holm over the two pipelines: the oracle's p doubled, vanilla's (the larger) as is; the oracle is better,
    # vanilla undecided: MDE = (z(1 - 0.025/2) + z(0.8)) * sqrt(1/10) / sqrt(10) = (2.2414 + 0.8416) * 0.1 = 0.31
    assert paired["oracle"]["p_holm"] == pytest.approx(2 * 2 / 2**8) and paired["oracle"]["verdict"] == "better"
    assert vanilla["p_holm"] == pytest.approx(1.0)
    assert vanilla["verdict"] == "no detectable difference at n = 10 (could detect ≥ 0.31)"
    # vanilla closes (1/10 - 2/10) / (10/10 - 2/10) = -1/8 of the closed-book -> oracle gap
    gap = {r["pipeline"]: r for r in section["gap_closed"]["results"]}
    assert gap["vanilla_rag"]["mean"] == pytest.approx(-1 / 8) and "target_met" not in gap["vanilla_rag"]


def check_position_curves(report, records):
    """Each record's gold position, and the curves recomputed from the saved answers."""
    section = report["position_curves"]
    assert set(section["left_out_pipelines"]) == {"closed_book"}
    for r in records:
        expected = first_gold_position(r["shown_ids"], r["gold_ids"]) if r["pipeline"] != "closed_book" else None
        assert r["gold_position"] == expected
    assert all(r["gold_position"] == 1 for r in records if r["pipeline"] == "oracle" and r["gold_ids"])
    for pipeline in ("vanilla_rag", "oracle"):
        usable = [r for r in records if r["pipeline"] == pipeline and r["gold_ids"]]
        curve = section["curves"][pipeline]
        assert sum(curve[b]["n"] for b in BUCKET_LABELS) == len(usable)
        for bucket in BUCKET_LABELS:
            mine = [r for r in usable if position_bucket(r["gold_position"]) == bucket]
            assert curve[bucket]["n"] == len(mine)
            for metric in ("answer_match", "exact_match"):
                if mine:
                    expected = statistics.fmean(answer_scores(r["answer"], r["answers"])[metric] for r in mine)
                    assert curve[bucket][metric] == pytest.approx(expected)
                else:
                    assert curve[bucket][metric] is None


def check_external_metrics(report, records):
    """Haystack's exact match agreed with ours above (same table value); the stemmed ROUGE-L (ragas' RougeScore
    definition) recomputed from the answers."""
    from rouge_score.rouge_scorer import RougeScorer

    implementations = report["metric_implementations"]
    assert "AnswerExactMatchEvaluator" in implementations["exact_match"]
    assert "RougeScorer" in implementations["rouge_l_ragas"]
    scorer = RougeScorer(["rougeL"], use_stemmer=True)
    for pipeline in ("closed_book", "vanilla_rag", "oracle"):
        scores = [max((scorer.score(normalize_answer(a), normalize_answer(r["answer"]))["rougeL"].fmeasure
                       for a in r["answers"] if normalize_answer(a)), default=0.0)
                  for r in records if r["pipeline"] == pipeline]
        row = report["summary"][pipeline]["open"]
        assert row["rouge_l_ragas"] == pytest.approx(statistics.fmean(scores))
        assert row["rouge_l_ragas"] >= row["rouge_l"] - 1e-9  # stemming only merges tokens


# the pipelines' own answer budgets, one request at a time, as a user runs it; the two controlled context types
# that BCU's faithfulness reads (the others go through the same cache code: half the answers, CI time); three
# questions, so that the tiny model (about 0.25 s an answer) is still answering a second or two after the third
KILL_RESUME_PIPELINES = ["closed_book", "vanilla_rag"]
KILL_RESUME_OPTIONS = ["--limit", "3", "--context-types", "gold,conflicting", "--no-progress"]
TINY_MODEL = "tiny-random-mistral"
TIMING = ("latency", "seconds", "per_second")  # what times a run (differs between any two runs)


def icr2(*args: str, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "icr2_components.cli", *args, "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def untimed(value, key: str = ""):
    """``value`` without what times the run: latency figures and the paired tests of latency."""
    if isinstance(value, dict):
        if value.get("metric") in ("latency_s",):
            return None
        return {k: untimed(v, k) for k, v in value.items() if not any(word in k for word in TIMING)}
    if isinstance(value, list):
        return [item for item in (untimed(v) for v in value) if item is not None]
    return value


def answers(out: Path) -> dict[str, dict]:
    """Each key's current record, without timing and the cache's own bookkeeping (seals, replacements)."""
    return {r["key"]: {k: v for k, v in r.items() if k not in ("latency_s", "record_sha", "replaces")}
            for r in read_answer_records(out / "answers.jsonl")}


def tiny_model_pipelines(folder: Path) -> list[str]:
    """The shipped kill-and-resume pipelines with the reader's model swapped for :data:`TINY_MODEL` (same file
    names, so the same pipeline names in the report).

    :returns: the ``compare`` arguments naming them."""
    folder.mkdir()
    paths = []
    for name in KILL_RESUME_PIPELINES:
        data = yaml.safe_load((ROOT / "pipelines" / f"{name}.yaml").read_text())
        data["components"]["reader"]["init_parameters"]["model"] = TINY_MODEL
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        paths.append(str(path))
    return ["compare", "--pipelines", *paths, *KILL_RESUME_OPTIONS]


def test_compare_killed_with_sigkill_mid_run_and_resumed_gives_the_uninterrupted_report_plumbing_tiny_random_mistral(
    tmp_path,
):
    args = tiny_model_pipelines(tmp_path / "pipelines")
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    run = icr2(*args, out=reference)
    assert run.wait(timeout=900) == 0, run.stdout.read()
    total = len(answers(reference))
    assert total == 3 * 2 * 2  # 3 questions x 2 context types x 2 pipelines

    victim = icr2(*args, out=resumed)
    cache = resumed / "answers.jsonl.gz"
    deadline = time.monotonic() + 900
    while victim.poll() is None and time.monotonic() < deadline:
        if cache.exists() and len(cache_lines(cache)) >= 3:  # answering: kill it wherever it is
            os.kill(victim.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    assert victim.wait(timeout=60) == -signal.SIGKILL, "the run finished before it could be killed mid-run"
    before = AnswerCache(cache, writable=False)
    assert 3 <= len(before.records) < total

    again = icr2(*args, out=resumed)
    printed = again.communicate(timeout=900)[0]
    assert again.returncode == 0, printed
    report = json.loads((resumed / "report.json").read_text())
    expected = json.loads((reference / "report.json").read_text())
    counters = report["run"]["counters"]
    assert counters["cached"] >= len(before.records)  # nothing answered before the kill is answered again
    assert counters["model_runs"] + counters["reused_no_context"] + counters["cached"] == total
    assert report["run"]["unreadable_cache_lines"] == before.cut_tail_lines
    assert answers(resumed) == answers(reference)
    for section in set(expected) - {"run", "files"}:
        assert untimed(report[section]) == untimed(expected[section]), section
    assert report["summary"]["vanilla_rag"]["gold"]["n"] == expected["summary"]["vanilla_rag"]["gold"]["n"] == 3
    # BCU recomputed from the resumed answers: gold -> gold answer, conflicting -> the substitute
    records = read_answer_records(cache)
    gold = [r for r in records if r["pipeline"] == "vanilla_rag" and r["context_type"] == "gold"]
    conflicting = [r for r in records if r["pipeline"] == "vanilla_rag" and r["context_type"] == "conflicting"]
    g = statistics.fmean(bcu(r["answer"], r["answers"]) for r in gold)
    c = statistics.fmean(bcu(r["answer"], [r["conflicting_answer"]]) for r in conflicting)
    assert report["cub"]["vanilla_rag"]["faithfulness"] == pytest.approx((g + c) / 2)

    # an answer edited by hand afterwards (the gzip cache unpacked, edited and packed again) is refused, naming the
    # file and the line
    lines = gzip.decompress(cache.read_bytes()).decode("utf-8").splitlines()
    edited = json.loads(lines[0])
    lines[0] = json.dumps({**edited, "answer": edited["answers"][0]}, ensure_ascii=False)
    cache.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode("utf-8")))
    refused = icr2(*args, out=resumed)
    printed = refused.communicate(timeout=900)[0]
    assert refused.returncode == 1
    assert f"{cache} line 1 ({edited['key']}) does not match its record_sha" in printed
    assert "Traceback" not in printed


def test_compare_tune_from_the_cli_writes_the_tuned_setting_and_tests_with_it(tmp_path, smollm2, monkeypatch, capsys):
    """``icr2 compare --tune`` through the CLI entry on the smallest real input: one dev and one test question,
    a two-value grid, one generated token. The pipeline's own alpha (0.5) is outside the grid, so the test run can
    only have the tuned value if the tuned YAML is what it ran."""
    data = yaml.safe_load((ROOT / "pipelines" / "cmt_cad.yaml").read_text())
    data["components"]["reader"]["init_parameters"]["alpha"] = 0.5
    data["metadata"]["tunable"] = {"reader.alpha": [1.0, 2.0]}
    source = tmp_path / "cad_small.yaml"
    source.write_text(yaml.safe_dump(data, sort_keys=False))
    used = []  # the alpha of every decoding reader call, in order
    original = ContextAwareDecodingReader.run

    @functools.wraps(original)  # Haystack reads the sockets from run's signature
    def recording(self, *args, **kwargs):
        used.append(self.alpha if kwargs.get("alpha") is None else kwargs["alpha"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ContextAwareDecodingReader, "run", recording)
    out = tmp_path / "run"
    code = main(["compare", "--pipelines", str(source), "--tune", "--limit", "1", "--dev-limit", "1",
                 "--context-types", "gold", "--max-new-tokens", "1", "--out", str(out), "--no-progress"])
    assert code == 0
    tuning = out / "tuning"
    table = json.loads((tuning / "cad_small.tuning.json").read_text())["table"]
    assert [row["setting"] for row in table] == [{"reader.alpha": 1.0}, {"reader.alpha": 2.0}]
    best = max(table, key=lambda row: row["mean_bcu"])["setting"]["reader.alpha"]  # ties: the first, as tuning does
    tuned_file = tuning / "cad_small.tuned.yaml"
    tuned = yaml.safe_load(tuned_file.read_text())
    assert tuned["components"]["reader"]["init_parameters"]["alpha"] == best
    assert tuned["metadata"]["tuned"]["setting"] == {"reader.alpha": best}
    # dev: the first question of the seeded dev split (seed 0), test: the first of the test split
    assert tuned["metadata"]["tuned"]["dev_questions"] == 1 and len(tuned["metadata"]["tuned"]["dev_question_ids"]) == 1
    # dev: each grid value over the same controlled contexts of the dev question; then the test run, tuned only
    dev_runs = len(used) - 1
    assert dev_runs >= 2 and used[:dev_runs] == [1.0] * (dev_runs // 2) + [2.0] * (dev_runs // 2)
    assert used[dev_runs:] == [best]
    records = read_answer_records(out / "answers.jsonl")
    assert [(r["pipeline"], r["pipeline_file"], r["context_type"]) for r in records] == [
        ("cad_small.tuned", str(tuned_file), "gold")]
    assert records[0]["question_id"] not in tuned["metadata"]["tuned"]["dev_question_ids"]
    assert f"tuned {source}: {{'reader.alpha': {best}}}" in capsys.readouterr().out
