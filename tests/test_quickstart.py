"""``icr2 quickstart``: its pipeline variants, its summary sentence on a hand-built report, and a tiny real run
with SmolLM2 (1 question, 2-token answers: plumbing, not numbers) whose output ends with the next step."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from icr2_components.cli import main
from icr2_components.commands.quickstart import (
    NEXT_STEPS,
    SHORT_ANSWER_PROMPT,
    paired_summary,
    quickstart_variant,
    write_variants,
)
from icr2_components.evaluation.reports.compare_report import build_report
from icr2_components.evaluation.statistics.proportions import exact_mcnemar, wilson_interval
from icr2_components.pipeline_spec import PipelineSpec

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.unit
def test_variants_cap_passages_and_ask_for_a_short_answer(tmp_path):
    reordered = yaml.safe_load((ROOT / "pipelines" / "reordered_lost_in_the_middle.yaml").read_text())
    variant, changes = quickstart_variant(reordered, 2, SHORT_ANSWER_PROMPT)
    assert variant["components"]["retriever"]["init_parameters"]["top_k"] == 2
    assert variant["components"]["prompt"]["init_parameters"]["system_prompt"] == SHORT_ANSWER_PROMPT
    assert changes == ["retriever.top_k 3 -> 2", f"prompt.system_prompt: {SHORT_ANSWER_PROMPT!r}"]
    assert reordered["components"]["retriever"]["init_parameters"]["top_k"] == 3  # the original is untouched
    assert quickstart_variant(reordered, 3, SHORT_ANSWER_PROMPT)[1] == [
        f"prompt.system_prompt: {SHORT_ANSWER_PROMPT!r}"
    ]
    # closed-book has no retriever and its own (concise) prompt: unchanged
    closed = yaml.safe_load((ROOT / "pipelines" / "closed_book.yaml").read_text())
    assert quickstart_variant(closed, 3, SHORT_ANSWER_PROMPT) == (closed, [])

    paths = write_variants(["vanilla_rag", "oracle", "closed_book"], ROOT / "pipelines", tmp_path, top_k=2)
    vanilla = Path(paths[0]).read_text()
    assert vanilla.startswith("# Written by `icr2 quickstart` from ") and "retriever.top_k 3 -> 2" in vanilla
    assert "unchanged" in Path(paths[2]).read_text().splitlines()[0]
    # the written oracle loads as a comparable pipeline and its prompt carries the instruction as system message
    spec = PipelineSpec.from_file(paths[1])
    assert spec.name == "oracle" and spec.context_input == "prompt.documents"
    from haystack import Document

    builder = spec.pipeline(controlled=False).get_component("prompt")
    messages = builder.run(query="who wrote hamlet?", documents=[Document(content="Hamlet is by Shakespeare.")])[
        "prompt"
    ]
    assert messages[0].is_from("system") and messages[0].text == SHORT_ANSWER_PROMPT
    assert messages[1].text.startswith("Please answer the following question given the following passages:")
    with pytest.raises(FileNotFoundError, match="--pipelines-dir"):
        write_variants(["no_such_pipeline"], ROOT / "pipelines", tmp_path, top_k=3)


def answer(pipeline, index, right):
    return {"key": f"{pipeline}|q{index}|open", "pipeline": pipeline, "question_id": f"q{index}", "query": f"q{index}?",
            "context_type": "open", "answer": "Paris" if right else "zzz", "answers": ["Paris"], "shown_ids": None,
            "gold_ids": [], "reads_context": pipeline != "closed_book", "selects_passages": False, "latency_s": 0.1,
            "prompt_tokens": 10}


def hand_report(oracle_right, closed_right):
    records = [answer("oracle", i, r) for i, r in enumerate(oracle_right)]
    records += [answer("closed_book", i, r) for i, r in enumerate(closed_right)]
    specs = [SimpleNamespace(name="closed_book", context_input=None),
             SimpleNamespace(name="oracle", context_input="prompt.documents")]
    return build_report(records, specs, ["open"])


@pytest.mark.unit
def test_paired_summary_states_both_intervals_and_the_exact_mcnemar_test():
    # 12 questions: both right on q0; oracle alone right on q1-q9; closed-book alone on none; q10, q11 neither
    oracle = [True] * 10 + [False, False]
    closed = [True] + [False] * 11
    report = hand_report(oracle, closed)
    line = paired_summary(report)
    o_low, o_high = wilson_interval(10, 12)
    c_low, c_high = wilson_interval(1, 12)
    difference = next(c for c in report["paired"]["comparisons"] if c["metric"] == "answer_match")["difference"]
    low, high = difference["ci95"]
    assert line == (f"Answer match [95% CI], oracle 0.833 [{o_low:.2f}, {o_high:.2f}] (n=12) vs closed_book 0.083 "
                    f"[{c_low:.2f}, {c_high:.2f}] (n=12). On the same 12 questions oracle alone is right on 9, "
                    f"closed_book alone on 0: difference +0.750 [{low:+.2f}, {high:+.2f}], exact McNemar p = "
                    f"{exact_mcnemar(9, 0):.4f} (Holm-adjusted over the 1 pipeline compared with closed_book: "
                    f"{exact_mcnemar(9, 0):.4f}): oracle is better than closed_book.")
    assert exact_mcnemar(9, 0) == pytest.approx(0.0039, abs=1e-4)  # 2 / 2^9
    assert low > 0 and high <= 1
    # 4 discordant pairs, all the oracle's: p = 2 / 16 = 0.125, not significant; MDE = 2.80158 * sqrt(4/8) / sqrt(8)
    weak = paired_summary(hand_report([True] * 4 + [False] * 4, [False] * 8))
    assert "oracle alone is right on 4, closed_book alone on 0:" in weak and "exact McNemar p = 0.1250" in weak
    assert weak.endswith(f"no detectable difference at n = 8 (could detect ≥ {2.80158 * 0.5 ** 0.5 / 8 ** 0.5:.2f}).")
    assert paired_summary(hand_report([True], [True]), pipeline="vanilla_rag").startswith("No paired result")


@pytest.mark.slow
def test_quickstart_tiny_run_prints_the_paired_summary_and_ends_with_the_next_step(tmp_path, smollm2, capsys,
                                                                                   monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "qs"
    code = main(["quickstart", "--compare-questions", "1", "--cub-questions", "0", "--questions", "1",
                 "--max-new-tokens", "2", "--out", str(out), "--no-progress"])
    assert code == 0
    printed = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert printed.endswith(" ".join(NEXT_STEPS.split()))  # the last thing said is what to try next
    assert "README 'Use your own LLM server'" in NEXT_STEPS and "--backend" in NEXT_STEPS
    assert "oracle alone is right on" in printed and "exact McNemar p =" in printed
    report = json.loads((out / "context" / "report.json").read_text())
    assert report["run"]["questions"] == 1 and report["run"]["max_new_tokens"] == 2
    assert report["paired"]["baseline"] == "closed_book"
    assert {c["pipeline"] for c in report["paired"]["comparisons"]} == {"vanilla_rag", "oracle"}
    assert all(len(row["open"]["answer_match_ci95"]) == 2 for row in report["summary"].values())
    for row in report["summary"].values():  # every printed number has its interval (or says why not: n = 1)
        for metric in ("answer_match", "token_f1", "latency_s", "prompt_tokens"):
            interval = row["open"]["intervals"][metric]
            assert interval["n"] == 1 and (interval["ci95"] is not None or interval["method"] == "single value")
    written = sorted(p.name for p in (out / "pipelines").glob("*.yaml"))
    assert written == ["closed_book.yaml", "oracle.yaml", "reordered_lost_in_the_middle.yaml", "vanilla_rag.yaml"]
    assert not (out / "cub").exists()  # --cub-questions 0 skips step 3


@pytest.mark.parametrize("flag,value", [("--compare-questions", "0"), ("--top-k", "0"), ("--max-new-tokens", "0"),
                                        ("--questions", "-1")])
def test_quickstart_refuses_bad_counts_in_one_line(flag, value, capsys):
    assert main(["quickstart", flag, value]) == 1
    error = capsys.readouterr().err.strip()
    assert error == f"icr2 quickstart: error: {flag} must be >= {0 if flag == '--questions' else 1}, got {value}."
