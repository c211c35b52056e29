"""The interactive page of a run (``explore.html``) driven in a real headless Chromium, opened from disk with the
network off: the question table holds every question, each paired comparison's discordant filter shows exactly
the counts of report.json, an opened question shows its passages with the gold one marked, and the console stays
free of errors. On a real compare report, a real reproduce report and a real eval-gate report (the committed runs
of bench/results, their report and answer records copied into a temporary folder and the page written there by the
command's own report writer).

Chromium comes from Debian's package (``bash scripts/setup.sh --tests`` installs it), driven by Playwright's Python
package pointed at it: no browser is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CHROMIUM = Path(os.environ.get("ICR2_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOT = ROOT / "docs" / "images" / "interactive-report.png"


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium through Playwright, every host name unresolvable (no network even if a page asked)."""
    if not CHROMIUM.is_file():
        pytest.fail(f"Chromium is not installed at {CHROMIUM}: run `bash scripts/setup.sh --tests` as root (it "
                    "installs Debian's chromium), or set ICR2_CHROMIUM to a Chromium binary.")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright's Python package is missing: pip install -e '.[test]' (no browser download needed).")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM),
                                              args=["--host-resolver-rules=MAP * ~NOTFOUND"])
        assert launched.version  # the system Chromium answered
        yield launched
        launched.close()


class Opened:
    """A page opened from disk in an offline context, with its console errors and every non-file request."""

    def __init__(self, browser, path: Path):
        self.context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("body[data-ready='1']")
        self.page.wait_for_selector("body[data-figures]")  # plotly.js (beside the page) drew the figures

    def _route(self, route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            self.requests.append(route.request.url)
            route.abort()

    def count(self) -> int:
        return int(self.page.get_attribute("#row-count", "data-count"))

    def comparisons(self) -> list[dict]:
        """Each paired comparison row of the summary: its label, condition, metric and two discordant buttons."""
        rows = []
        for tr in self.page.query_selector_all("#comparison-table tbody tr"):
            cells = [td.inner_text() for td in tr.query_selector_all("td")]
            a, b = cells[0].split(" vs ", 1)
            rows.append({"a": a, "b": b, "cond": cells[1], "metric": cells[2], "index": int(tr.get_attribute(
                "data-comparison")), "buttons": tr.query_selector_all("button.discordant")})
        return rows

    def check_discordant(self, expected, click_metric: str, clicks: int = 4) -> int:
        """Every comparison's two discordant filters find report.json's counts: clicked for the first ``clicks``
        comparisons of ``click_metric``, through the page's own handler (``explore.setPair``, what a click calls)
        for the others, to keep the test short. Returns the comparisons checked."""
        rows = self.comparisons()
        handled = []
        for row in rows:
            only_a, only_b = expected(row)
            click = row["metric"] == click_metric and clicks > 0
            clicks -= click
            for side, button, want in zip("ab", row["buttons"], (only_a, only_b), strict=True):
                if click:
                    button.click()
                    assert self.count() == want, (row["a"], row["b"], row["cond"], row["metric"], side)
                    assert len(self.page.query_selector_all("#questions tbody tr")) == min(want, 50)
                else:
                    handled.append((row["index"], side, want))
        found = self.page.evaluate("(pairs) => pairs.map(([i, side]) => { window.explore.setPair(i, side); "
                                   "return window.explore.rows(); })", [[i, side] for i, side, _ in handled])
        assert found == [want for _, _, want in handled]
        return len(rows)

    def close(self) -> None:
        assert self.errors == [], self.errors
        assert self.requests == [], self.requests
        self.context.close()


def _copy(source: Path, target: Path, names: dict[str, str]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name, new in names.items():
        (target / new).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target / new)


def test_compare_page_in_chromium(browser, tmp_path):
    from icr2_components.evaluation.compare.cache import read_answer_records
    from icr2_components.evaluation.reports.interactive_page import write_compare_page
    from icr2_components.evaluation.reports.rendering import write_report

    _copy(RESULTS / "ab_cub", tmp_path, {"report.json": "report.json", "answers.jsonl.gz": "answers.jsonl.gz"})
    report = json.loads((tmp_path / "report.json").read_text())
    expected_report = json.loads(json.dumps(report))
    records = read_answer_records(tmp_path / "answers.jsonl.gz")
    write_report(report, tmp_path)  # what the compare command writes, in its order
    page = write_compare_page(report, tmp_path, records)
    assert page == tmp_path / "explore.html" and (tmp_path / "plotly.min.js").is_file()
    opened = Opened(browser, page)
    rows = sum(max(cells[kind]["n"] + cells[kind]["errors"] for cells in expected_report["summary"].values())
               for kind in expected_report["run"]["context_types"])
    assert opened.count() == rows == 298  # 100 questions under gold and irrelevant, 98 with a conflicting one
    paired = {(c["pipeline"], c["baseline"], c["context_type"], c["metric"]): c
              for c in expected_report["paired"]["comparisons"] if "only_pipeline" in c}

    def expected(row):
        c = paired.pop((row["a"], row["b"], row["cond"], row["metric"]))
        return c["only_pipeline"], c["only_baseline"]

    # every comparison of 0/1 scores in report.json, each once
    assert opened.check_discordant(expected, "answer_match") > 0 and paired == {}
    # one question opened under the gold context: its passages in order, the gold passage marked (this cache
    # predates recorded passage text: the ids in order)
    opened.page.click("#clear-filters")
    opened.page.select_option("#cond-filter", "gold")
    opened.page.click("#questions tbody tr >> nth=0 >> td >> nth=0")
    question_id = opened.page.inner_text("#questions tbody tr.open td >> nth=0")
    gold_ids = {i for r in records if r["question_id"] == question_id for i in r.get("gold_ids") or []}
    marked = opened.page.query_selector_all("#detail .passage.gold")
    assert marked and all(m.get_attribute("data-id") in gold_ids for m in marked)
    assert opened.page.query_selector_all("#detail .pipeline-block")
    opened.close()


def test_reproduce_page_in_chromium(browser, tmp_path):
    from icr2_components.evaluation.experiments.protocol import get_experiment
    from icr2_components.evaluation.experiments.report import write_report

    source = RESULTS / "reproduce" / "lost-in-the-middle"
    _copy(source, tmp_path, {"report.json": "report.json", "compare_answers.jsonl.gz": "compare/answers.jsonl.gz",
                             "references_answers.jsonl.gz": "references/answers.jsonl.gz"})
    report = json.loads((tmp_path / "report.json").read_text())
    expected_report = json.loads(json.dumps(report))
    files = write_report(report, tmp_path, get_experiment(report["experiment"]["name"]))  # reproduce's writer
    opened = Opened(browser, Path(files["explore"]))
    assert opened.count() == expected_report["questions"]["drawn"] * len(expected_report["conditions"]) == 600
    variants = {(v["variant"], v["baseline"], r["condition"]): (r["only_variant"], r["only_baseline"])
                for v in expected_report["variants_vs_first"] for r in v["rows"]}
    references = {(f["variant"], f["reference"], r["condition"]): (r["only_condition"], r["only_reference"])
                  for f in expected_report["conditions_vs_references"] for r in f["rows"]}
    wanted = {**variants, **references}
    assert opened.check_discordant(lambda row: wanted.pop((row["a"], row["b"], row["cond"])), "correct") == 15
    assert wanted == {}
    # the gold document at position 5 of 10: the fifth passage shown is the marked one
    opened.page.click("#clear-filters")
    opened.page.select_option("#cond-filter", "10docs@5")
    opened.page.click("#questions tbody tr >> nth=0 >> td >> nth=0")
    first = opened.page.query_selector("#detail .pipeline-block")
    passages = first.query_selector_all(".passage")
    assert len(passages) == 10
    assert [i for i, p in enumerate(passages, 1) if "gold" in p.get_attribute("class")] == [5]
    # the screenshot of the README: a comparison's discordant questions, one click from the summary, one opened
    opened.page.click("#close-detail")
    opened.page.click("#comparison-table tr:has(td:text-is('10docs@5')) button.discordant[data-side='a'] >> nth=0")
    opened.page.click("#questions tbody tr >> nth=0 >> td >> nth=0")
    opened.page.evaluate("document.querySelector('#filters').scrollIntoView()")
    shot = tmp_path / "interactive-report.png"
    opened.page.screenshot(path=str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("ICR2_UPDATE_SCREENSHOT"):  # the README's picture, taken again on demand
        from PIL import Image

        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        # 128 colours: a page of text and tables loses nothing visible, the file a third of the size
        Image.open(shot).convert("RGB").quantize(colors=128).save(SCREENSHOT, optimize=True)
    opened.close()


def test_eval_gate_page_in_chromium(browser, tmp_path):
    from icr2_components.evaluation.reports.gate_report import write_gate_report
    from icr2_components.evaluation.reports.interactive_page import write_gate_page

    report = json.loads((RESULTS / "gate_confirm" / "tradeoff.json").read_text())
    report["labels"]["files"] = [str(ROOT / f) for f in report["labels"]["files"]]
    expected_report = json.loads(json.dumps(report))
    write_gate_report(report, tmp_path, title="gates", cost=report["all"]["cost"])  # what eval-gate writes
    opened = Opened(browser, write_gate_page(report, tmp_path))
    assert opened.count() == len(expected_report["rows"]) == 529

    def expected(row):
        scope = expected_report["all"] if row["cond"] == "all" else expected_report["by_source"][row["cond"]]
        c = scope["methods"][row["a"]]["vs_always"]["answer_match"]
        return c["only_pipeline"], c["only_baseline"]

    assert opened.check_discordant(expected, "answer_match") > 0
    # a question whose passages hold a gold answer: the passage is marked and the answer highlighted in it
    labels = {}
    for path in expected_report["labels"]["files"]:
        for line in Path(path).read_text().splitlines():
            record = json.loads(line)
            labels[record["id"]] = record
    question_id = next(r["id"] for r in expected_report["rows"] if any(
        a.lower() in p.lower() for p in labels[r["id"]]["passages"] for a in labels[r["id"]]["answers"] if a.strip()))
    opened.page.click("#clear-filters")
    opened.page.fill("#search", question_id)
    opened.page.click(f"#questions tbody td:text-is('{question_id}')")
    marked = opened.page.query_selector_all("#detail .passage.gold")
    assert marked and all(m.query_selector("mark") for m in marked)
    opened.close()


def test_compare_page_shows_the_prompt_and_what_rap_and_the_gate_did_on_a_real_smollm2_run(browser, tmp_path):
    """A real compare run of the shipped rap (corpus builder and RAP filter) and adaptive_rag (the learned gate)
    pipelines with SmolLM2 on two questions: each new record carries the prompt its reader was given, the passages
    shown with their text, and its techniques' traces; the opened question shows the prompt, the passages RAP kept
    and dropped marked apart, the corpus builder's budget and the gate's decision, as the records say."""
    from icr2_components.evaluation.compare.cache import read_answer_records
    from icr2_components.evaluation.compare.run import run_compare

    pipelines = [str(ROOT / "pipelines" / "rap.yaml"), str(ROOT / "pipelines" / "adaptive_rag.yaml")]

    def compare(**more):
        # in a thread of its own: Playwright's sync API keeps an event loop running in this one, and compare's
        # ordered_calls runs its own loop
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(run_compare, pipelines, context_types="open", limit=2, out_dir=tmp_path,
                               max_new_tokens=4, progress=False, **more).result()

    report = compare()
    assert report["run"]["counters"]["model_runs"] == 4
    records = {(r["pipeline"], r["question_id"]): r for r in read_answer_records(tmp_path / "answers.jsonl.gz")}
    assert len(records) == 4
    for (pipeline, _), record in records.items():
        assert record["prompt"].startswith("user:\n") and record["query"] in record["prompt"]
        assert record["prompt_chars"] == len(record["prompt"]) and "prompt_truncated" not in record
        if pipeline == "rap":
            assert len(record["shown_passages"]) == len(record["shown_ids"])  # the kept passages' text
            rap, corpus = record["trace"]["rap_filter"], record["trace"]["corpus"]
            assert rap["kept_ids"] == record["shown_ids"] and rap["dropped_ids"]
            assert set(rap["kept_ids"]) | set(rap["dropped_ids"]) == set(corpus["confounder_ids"])
            assert set(record["trace_passages"]) == set(rap["dropped_ids"])  # the dropped ones' text is kept
            assert corpus["budget"] == 8 and corpus["budget_unit"] == "passages"
            for text in record["shown_passages"]:  # the kept passages are what the reader read
                assert text in record["prompt"]
        else:
            assert record["trace"]["gate"]["decision"] in ("retrieve", "no_retrieval")
            assert isinstance(record["trace"]["gate"]["score"], float)
    # the fields describe answers, not their keys: a second run reuses every one
    again = compare(report_only=True)
    assert again["run"]["counters"]["cached"] == 4 and again["run"]["counters"]["model_runs"] == 0

    opened = Opened(browser, tmp_path / "explore.html")
    assert opened.count() == 2
    opened.page.click("#questions tbody tr >> nth=0 >> td >> nth=0")
    question_id = opened.page.inner_text("#questions tbody tr.open td >> nth=0")
    rap, gated = records[("rap", question_id)], records[("adaptive_rag", question_id)]
    block = opened.page.query_selector("#detail .pipeline-block[data-pipeline='rap']")
    assert block.query_selector(".prompt-block summary").inner_text().startswith("Prompt (")
    assert block.query_selector("pre.prompt").text_content() == rap["prompt"]
    trace = block.query_selector(".trace[data-technique='rap_filter']")
    kept = [li.get_attribute("data-id") for li in trace.query_selector_all(".passage.kept")]
    dropped = [li.get_attribute("data-id") for li in trace.query_selector_all(".passage.dropped")]
    assert kept == rap["trace"]["rap_filter"]["kept_ids"]
    assert sorted(dropped) == sorted(rap["trace"]["rap_filter"]["dropped_ids"])
    assert "text not recorded" not in trace.inner_text()  # every passage RAP saw, kept or dropped, has its text
    corpus = block.query_selector(".trace[data-technique='corpus_builder']")
    assert corpus.query_selector(".budget").inner_text() == f"{rap['trace']['corpus']['used']} of 8 passages"
    gate = opened.page.query_selector("#detail .pipeline-block[data-pipeline='adaptive_rag'] .gate-decision")
    assert gate.inner_text() == gated["trace"]["gate"]["decision"]
    opened.close()
