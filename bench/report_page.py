"""The interactive run page (``explore.html``) in Debian's Chromium: load and filter times on the biggest committed
run, the page's size, against the static report.html of the same run opened in the same browser.

Runs: ``bench/results/reproduce/lost-in-the-middle`` (one answer cache of 6,400 answers: 6,000 under its 15
conditions of 10, 20 and 30 documents, 200 questions x 2 prompt variants, and 400 of the closed-book and oracle
references; its three reports, report.json and report_20docs/30docs.json, make one page of 3,000 question x
condition rows, ``interactive_page.merge_reproduce_reports``) and ``bench/results/ab_cub`` (a compare run: 2,682
answers, 9 pipelines x 3 context types). Each page is written into a temporary folder (with plotly.min.js beside
it) and opened from disk in an offline browser context, every host name unresolvable.

Measured, each over ``--repeats`` fresh page loads (median and all values, ms):
- ``table_ms``: navigation start to the question table's first render (``window.exploreReady``, the page's own
  ``performance.now()``, which counts from the navigation's start);
- ``load_ms``: navigation start to the load event's end (plotly.js parsed, the figures drawn on DOMContentLoaded);
- the static report.html's load event (``baseline_load_ms``), the same run's page of tables and a PNG;
- filters, each timed inside the page around the synchronous handler (input event to the table re-rendered):
  text search, condition, one pipeline's outcome, a paired comparison's discordant questions, and a sort.
The machine's load average is recorded: the measurement machine is shared (2 cores).

Usage: .venv/bin/python bench/report_page.py [--repeats 5] [--out bench/results/report_page.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("ICR2_CHROMIUM", "/usr/bin/chromium")
RUNS = {"reproduce lost-in-the-middle (6,400 answers)": ROOT / "bench/results/reproduce/lost-in-the-middle",
        "compare ab_cub (2,682 answers)": ROOT / "bench/results/ab_cub"}

FILTERS = {
    "search": "(() => { const s = document.querySelector('#search'); s.value = 'world'; "
              "s.dispatchEvent(new Event('input')); })",
    "condition": "(() => { const s = document.querySelector('#cond-filter'); s.selectedIndex = 2; "
                 "s.dispatchEvent(new Event('change')); })",
    "outcome": "(() => { const s = document.querySelector('.outcome-filter'); s.value = 'wrong'; "
               "s.dispatchEvent(new Event('change')); })",
    "discordant": "(() => { document.querySelector('button.discordant').click(); })",
    "sort": "(() => { document.querySelector('#questions th:nth-child(2)').click(); })",
}


def timed(page, action: str) -> float:
    """Milliseconds the page spends in ``action`` (a synchronous handler: the table is re-rendered on return)."""
    return page.evaluate(f"() => {{ document.querySelector('#clear-filters').click(); const t = performance.now(); "
                         f"{action}(); return performance.now() - t; }}")


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 1), "values": [round(v, 1) for v in values]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench/results/report_page.json"))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from icr2_components.evaluation.reports.interactive_page import PLOTLY_FILE, write_page_for_run

    results: dict = {"browser": None, "load_average_before": os.getloadavg(), "repeats": args.repeats, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--host-resolver-rules=MAP * ~NOTFOUND"])
        results["browser"] = f"Chromium {browser.version} (Debian), headless, offline context"
        for label, run in RUNS.items():
            out = Path(tmp) / run.name
            start = time.perf_counter()
            page_path = write_page_for_run(run, out)
            written_s = time.perf_counter() - start
            data = json.loads(page_path.read_text().split('id="page-data">', 1)[1].split("</script>", 1)[0])
            shared = data.get("shared") or {}  # reproduce's reference answers, stored once per question
            answers = sum(len(r["cells"]) for r in data["rows"]) + sum(len(c) for c in shared.values())
            tables, loads, baselines = [], [], []
            filters: dict[str, list[float]] = {name: [] for name in FILTERS}
            rows_after = {}
            for _ in range(args.repeats):
                context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000})
                page = context.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
                page.goto(page_path.as_uri())
                page.wait_for_selector("body[data-figures]")
                tables.append(page.evaluate("window.exploreReady"))
                loads.append(page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd"))
                for name, action in FILTERS.items():
                    filters[name].append(timed(page, action))
                    rows_after[name] = page.evaluate("window.explore.rows()")
                assert not errors, errors
                page.goto((run / "report.html").as_uri())
                page.wait_for_load_state("load")
                baselines.append(page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd"))
                context.close()
            results["runs"][label] = {
                "run": str(run.relative_to(ROOT)),
                "rows": len(data["rows"]), "answers_in_page": answers, "comparisons": len(data["comparisons"]),
                "page_bytes": page_path.stat().st_size, "plotly_js_bytes": (out / PLOTLY_FILE).stat().st_size,
                "static_report_html_bytes": (run / "report.html").stat().st_size,
                "page_written_s": round(written_s, 2),
                "table_ms": summary(tables), "load_ms": summary(loads), "baseline_load_ms": summary(baselines),
                "filter_ms": {name: summary(values) for name, values in filters.items()},
                "rows_after_filter": rows_after,
            }
            print(label, json.dumps({k: v for k, v in results["runs"][label].items()
                                     if k not in ("filter_ms",)}, default=str))
            print("  filters (median ms):", {k: v["median"] for k, v in results["runs"][label]["filter_ms"].items()})
        browser.close()
    results["load_average_after"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
