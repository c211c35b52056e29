"""``icr2 compare --pipelines a.yaml b.yaml ... [--dataset FILE] [--context-types ...]``: A/B of techniques."""

from __future__ import annotations

DEFAULT_CONTEXT_TYPES = "open,gold,conflicting,irrelevant"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="run pipelines over the same questions and context types; report EM/F1/ROUGE-L/BCU, a Pareto plot "
        "and accuracy by gold passage position",
        description="Resumable (a per-question JSONL cache in --out keyed by pipeline file hash, question id and "
        "context type): re-running the same command redoes only what is missing.",
    )
    parser.add_argument("--pipelines", nargs="+", required=True, help="pipeline YAMLs with declared inputs/outputs")
    parser.add_argument("--dataset", help="KILT task file or ICR2 benchmark JSONL (default: the bundled NQ sample)")
    parser.add_argument("--context-types", default=DEFAULT_CONTEXT_TYPES,
                        help=f"comma-separated subset of open,gold,conflicting,irrelevant (default {DEFAULT_CONTEXT_TYPES})")
    parser.add_argument("--limit", type=int, help="the first N questions with answers")
    parser.add_argument("--out", default="runs/compare", help="report and cache folder (default runs/compare)")
    parser.add_argument("--max-new-tokens", type=int, help="override every reader's answer budget")
    parser.add_argument("--index", default="indexing/kilt-sample.yaml",
                        help="index config for gold passages and irrelevant candidates of a KILT task file")
    parser.add_argument("--backend", help="backend file (backends/*.yaml) every pipeline's model follows, e.g. "
                        "backends/llama_cpp_server.yaml (default: ICR2_BACKEND, else the pipelines' own local models)")
    parser.add_argument("--baseline", help="the pipeline (its file name without .yaml) every other is compared with "
                        "on the same questions: paired differences with intervals, exact tests, Holm, verdicts "
                        "(default: the first of --pipelines)")
    parser.add_argument("--stats-seed", type=int, default=0,
                        help="seed of the report's bootstrap intervals and permutation tests (default 0)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--tune", action="store_true",
                        help="first tune each pipeline's metadata.tunable on a dev split (max mean BCU over gold, "
                        "conflicting, irrelevant; CUB) and compare the tuned YAMLs (written to --out/tuning)")
    parser.add_argument("--dev-limit", type=int, default=10, help="dev questions for --tune (default 10)")
    parser.add_argument("--dev-offset", type=int,
                        help="first dev question (default: right after the --limit test questions, so they are disjoint)")
    parser.set_defaults(handler=run)


def print_table(console, title: str, header: list[str], rows: list[list[str]]) -> None:
    from rich.table import Table

    table = Table(title=title)
    for column in header:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def print_report(report: dict) -> None:
    from icr2_components.commands._console import make_console
    from icr2_components.evaluation.compare_report import (
        HEADLINE_METRICS,
        cub_rows,
        gap_rows,
        paired_rows,
        summary_rows,
    )
    from icr2_components.evaluation.position_curves import curve_rows, shape_rows

    console = make_console()
    tables = [("per pipeline and context type: mean [95% interval]", summary_rows(report))]
    paired = report.get("paired") or {}
    if paired.get("comparisons"):
        tables.append((f"against {paired['baseline']} on the same questions (Holm across pipelines; every metric in "
                       f"report.md)", paired_rows(report, metrics=HEADLINE_METRICS)))
    if (paired.get("gap_closed") or {}).get("results"):
        tables.append((f"share of the {paired['baseline']} -> oracle gap closed (answer match, open)",
                       gap_rows(report)))
    tables.append(("faithfulness / robustness (CUB BCU) [95% interval]", cub_rows(report)))
    if report.get("position_curves", {}).get("curves"):
        tables.append(("accuracy by position of the first gold passage [95% interval]",
                       curve_rows(report["position_curves"])))
        tables.append(("is the position curve's shape significant?", shape_rows(report["position_curves"])))
    for title, (header, rows) in tables:
        print_table(console, f"icr2 compare: {title}", header, rows)
    run = report["run"]
    console.print(f"model runs: {run['counters']}; dataset skips: {run['dataset_skips']['counts']}; "
                  f"contexts not built: {run['missing_contexts']}")
    console.print(f"report: {report['files']['markdown']} {report['files']['html']} {report['files']['json']}")


def run(args) -> int:
    from icr2_components.backends import resolve_backend
    from icr2_components.evaluation.compare import run_compare

    backend = resolve_backend(args.backend)
    pipelines = args.pipelines
    if args.tune:
        from pathlib import Path

        from icr2_components.evaluation.tuning import tune_pipeline

        if args.dev_offset is None and args.limit is None:
            raise ValueError("--tune needs --limit (test questions) or --dev-offset, so dev and test questions differ.")
        if args.baseline is not None:  # a wrong name fails before tuning (run_compare checks the tuned names)
            from icr2_components.evaluation.compare_report import resolve_baseline

            resolve_baseline(args.baseline, [Path(p).stem for p in pipelines])
        offset = args.dev_offset if args.dev_offset is not None else args.limit
        tuned = [tune_pipeline(p, dataset=args.dataset, dev_limit=args.dev_limit, dev_offset=offset,
                               out_dir=Path(args.out) / "tuning", max_new_tokens=args.max_new_tokens, index=args.index,
                               backend=backend)
                 for p in pipelines]
        for result in tuned:
            print(f"tuned {result['pipeline']}: {result['best'] or 'nothing tunable'} "
                  f"(dev mean BCU {result['best_mean_bcu']}, {result['dev_questions']} questions)")
        pipelines = [result["tuned_file"] for result in tuned]
    report = run_compare(pipelines, dataset=args.dataset, context_types=args.context_types, limit=args.limit,
                         out_dir=args.out, max_new_tokens=args.max_new_tokens, index=args.index,
                         progress=not args.no_progress, backend=backend, baseline=args.baseline,
                         seed=args.stats_seed)
    print_report(report)
    return 0
