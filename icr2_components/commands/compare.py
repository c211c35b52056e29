"""``icr2 compare --pipelines a.yaml b.yaml ... [--dataset FILE] [--context-types ...]``: A/B of techniques."""

from __future__ import annotations

import argparse

DEFAULT_CONTEXT_TYPES = "open,gold,conflicting,irrelevant"
# kilt.questions.DATASET_FORMATS, copied so that registering the command imports no reader (a test checks they agree)
DATASET_FORMATS = ("kilt", "icr2", "jsonl", "csv", "parquet", "hf_dataset")


def register(subparsers) -> None:
    from icr2_components.evaluation.compare.splits import DEFAULT_DEV_FRACTION, DEFAULT_SPLIT_SEED

    parser = subparsers.add_parser(
        "compare",
        help="run pipelines over the same questions and context types; report EM/F1/ROUGE-L/BCU, a Pareto plot "
        "and accuracy by gold passage position",
        description="Resumable (a per-question JSONL cache in --out keyed by pipeline hash, question id and "
        "context type): re-running the same command redoes only what is missing. The pipeline hash covers the "
        "YAML's behaviour and, for a pipeline that reads an index, the index config's contents and the stores' "
        "retrieval version; each answer to given passages records their hash (context_sha), and one recorded for "
        "other passages than this run builds is redone (counted as stale_context; left out by --report-only); "
        "one asked another question text than the dataset's now likewise (stale_question). Answers cached before "
        "context_sha existed are reused and counted as context_unchecked. Gold labels are not part of an answer: "
        "every answer, cached or new, is scored with the dataset's labels now (an edited gold re-scores, it asks "
        "nothing), and the report names the dataset and its SHA-256.",
    )
    parser.add_argument("--pipelines", nargs="+",
                        help="shipped pipeline names (e.g. closed_book vanilla_rag) or pipeline YAMLs with declared "
                        "inputs/outputs (required unless --ab-log)")
    parser.add_argument("--ab-log", metavar="PATH",
                        help="instead of running pipelines, report the arms of an online A/B log (icr2 serve --ab-log):"
                        " latency and tokens per arm with 95%% intervals, unpaired Welch and Mann-Whitney tests "
                        "against --baseline (default: the largest arm); answer match with --labels")
    parser.add_argument("--labels", metavar="FILE",
                        help="with --ab-log: gold answers, JSONL of {\"request_id\" or \"query\": ..., "
                        "\"answers\": [...]}")
    parser.add_argument("--dataset",
                        help="the questions: a KILT task file, an ICR2 benchmark JSONL, or a question set of your own "
                        "(JSONL, CSV/TSV, Parquet, a folder made by datasets' save_to_disk, a question-set YAML), or a "
                        "shipped question set (python-docs); default: the bundled NQ sample. A question set needs "
                        "only a question per row (answers, gold passage ids, a conflicting answer, an id optional)")
    parser.add_argument("--dataset-format", choices=DATASET_FORMATS,
                        help="how to read --dataset (default: from it: a folder is hf_dataset, .csv/.tsv csv, .parquet "
                        "parquet, .yaml a question-set file; JSON lines with ICR2's or KILT's fields are read as "
                        "those, other JSON lines as a jsonl question set)")
    parser.add_argument("--field", action="append", default=[], metavar="FIELD=COLUMN",
                        help="where a question set holds a field (repeatable): question, answers, gold_passage_ids, "
                        "gold_sources (documents holding the answer, as the index's file_path meta names them), "
                        "conflicting_answer, id; a column or a dotted path (answers=answers.text); FIELD= (empty) "
                        "when the set has none. Default: the field's own name (docs/evaluation.md)")
    parser.add_argument("--dataset-split", metavar="SPLIT",
                        help="the split of a saved datasets DatasetDict (needed when it has several)")
    parser.add_argument(
        "--context-types",
        default=DEFAULT_CONTEXT_TYPES,
        help=f"comma-separated subset of open,gold,conflicting,irrelevant,corpus (default {DEFAULT_CONTEXT_TYPES}; "
        "corpus: an ICR2 benchmark record's whole corpus in context, for --dataset an ICR2 JSONL)",
    )
    parser.add_argument("--limit", type=int, help="the first N questions with answers (of --split, if given)")
    parser.add_argument("--question-ids", metavar="FILE",
                        help="run exactly these questions, in file order: one id per line, # comments (a run's "
                        "question_ids.txt is one); ids not in the dataset are counted and reported")
    parser.add_argument("--split", choices=["dev", "test"],
                        help="one side of the seeded dev/test split of the dataset's question ids (default: all "
                        "questions; test with --tune)")
    parser.add_argument("--split-seed", type=int, default=DEFAULT_SPLIT_SEED,
                        help=f"seed of the dev/test split (default {DEFAULT_SPLIT_SEED})")
    parser.add_argument("--dev-fraction", type=float, default=DEFAULT_DEV_FRACTION,
                        help=f"share of question ids in the dev split (default {DEFAULT_DEV_FRACTION}; an id's side "
                        "depends only on it and the seed, so it is stable as the file grows)")
    parser.add_argument("--out", default="runs/compare", help="report and cache folder (default runs/compare)")
    parser.add_argument("--max-new-tokens", type=int, help="override every reader's answer budget")
    parser.add_argument("--index", metavar="CONFIG",
                        help="index config every pipeline's IndexRetriever reads instead of the one its YAML names "
                        "(a shipped name such as kilt-sample-elasticsearch, or a file; the answer cache keeps the two "
                        "apart), and the source of gold passages and irrelevant candidates of a KILT task file "
                        "(default: ICR2_INDEX_CONFIG, else kilt-sample with the pipelines as written)")
    parser.add_argument("--backend", help="backend every pipeline's model follows: a shipped name (e.g. "
                        "llama_cpp_server) or a backend file (default: ICR2_BACKEND, else the pipelines' own models)")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="answers requested at once from a served backend (default: the backend file's "
                        "max_concurrency, else its kind's default: 4 served, 1 in-process); results, cache and "
                        "report are those of a sequential run")
    parser.add_argument("--baseline", help="the pipeline (its file name without .yaml) every other is compared with "
                        "on the same questions: paired differences with intervals, exact tests, Holm, verdicts "
                        "(default: the first of --pipelines)")
    parser.add_argument("--stats-seed", type=int, default=0,
                        help="seed of the report's bootstrap intervals and permutation tests (default 0)")
    parser.add_argument("--batch-size", type=int, default=1,
                        help="answers a pipeline generates together, in one generate call (default 1): for pipelines "
                        "whose reader batches (LocalChatReader as the last step); the others, and white-box decoding "
                        "readers, answer one at a time (logged). The cache and report are those of 1 with a float32 "
                        "reader; in bfloat16/float16 some greedy replies differ (warned)")
    parser.add_argument("--reuse-prompt-prefix", action="store_true",
                        help="in-process readers (LocalChatReader) start each reply from the last prompt's key/value "
                        "cache where the two prompts share a prefix (the same documents with one moved, the same "
                        "instruction): faster, the same greedy replies in float32, so the cache and report are those "
                        "without it")
    parser.add_argument("--judge", metavar="BACKEND",
                        help="also judge every answer without gold labels, with ragas' judge metrics asked of this "
                        "backend's model (a shipped name such as llama_cpp_server, or a backend file): groundedness "
                        "to the passages shown, answer relevance, context relevance; cached in "
                        "--out/judgements.jsonl.gz, reported with intervals, n, unparsable replies and paired tests "
                        "(docs/evaluation.md)")
    parser.add_argument("--judge-metrics", metavar="M1,M2",
                        help="comma-separated subset of groundedness,answer_relevance,context_relevance (default all)")
    parser.add_argument("--judge-concurrency", type=int,
                        help="judge requests at once (default: the judge backend's max_concurrency)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--report-only", action="store_true",
                        help="run no model: report on the questions the cache already answers for every pipeline "
                        "(partial results of a long, resumable run; the others are counted)")
    parser.add_argument("--tune", action="store_true",
                        help="first tune each pipeline's metadata.tunable on the dev split (max mean BCU over gold, "
                        "conflicting, irrelevant; CUB), then compare the tuned YAMLs (written to --out/tuning) on "
                        "the disjoint test split")
    parser.add_argument("--dev-limit", type=int, default=10,
                        help="dev questions for --tune: the first N of the dev split (default 10)")
    parser.add_argument("--dev-offset", type=int, help=argparse.SUPPRESS)  # replaced by the split; refused in run
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
    from icr2_components.evaluation.reports.compare_report import HEADLINE_METRICS
    from icr2_components.evaluation.reports.position_curves import curve_rows, shape_rows
    from icr2_components.evaluation.reports.rendering import (
        coverage_rows,
        cub_rows,
        gap_rows,
        paired_rows,
        question_set_lines,
        summary_rows,
    )

    console = make_console()
    tables = [("per pipeline and context type: mean [95% interval]", summary_rows(report))]
    paired = report.get("paired") or {}
    if paired.get("comparisons"):
        tables.append((f"against {paired['baseline']} on the same questions (Holm across pipelines; every metric in "
                       f"report.md)", paired_rows(report, metrics=HEADLINE_METRICS)))
    if (paired.get("gap_closed") or {}).get("results"):
        tables.append((f"share of the {paired['baseline']} -> oracle gap closed (answer match, open)",
                       gap_rows(report)))
    coverage = coverage_rows(report)
    if coverage[1]:
        tables.append(("metrics computed on fewer than the run's questions, and why", coverage))
    tables.append(("faithfulness / robustness (CUB BCU) [95% interval]", cub_rows(report)))
    if report.get("judge"):
        from icr2_components.evaluation.reports.rendering import judge_rows

        judge = report["judge"]
        tables.append((f"judged without gold labels by {judge['judge']}: mean [95% interval], n (unparsable)",
                       judge_rows(report)))
        tables.append((f"judge metrics against {judge['paired'].get('baseline')} on the same answers (Holm across "
                       "pipelines)", paired_rows({"paired": judge["paired"]}, metrics=list(judge["metrics"]))))
    if report.get("position_curves", {}).get("curves"):
        tables.append(("accuracy by position of the first gold passage [95% interval]",
                       curve_rows(report["position_curves"])))
        tables.append(("is the position curve's shape significant?", shape_rows(report["position_curves"])))
    for title, (header, rows) in tables:
        print_table(console, f"icr2 compare: {title}", header, rows)
    for name, why in (report.get("omitted_columns") or {}).items():
        console.print(f"{name} left out of the tables: {why}")
    run = report["run"]
    console.print(f"model runs: {run['counters']}; dataset skips: {run['dataset_skips']['counts']}; "
                  f"contexts not built: {run['missing_contexts']}")
    for line in question_set_lines(run.get("question_set")):
        console.print(line)
    counters = run["counters"]
    if counters.get("stale_context"):
        console.print(f"{counters['stale_context']} cached answer(s) were given other passages than this run builds "
                      "(stale_context): " + ("left out of this report" if run.get("report_only") else "re-answered"))
    if counters.get("stale_budget"):
        console.print(f"{counters['stale_budget']} cached answer(s) were answered under another --max-new-tokens "
                      "(stale_budget): " + ("left out of this report" if run.get("report_only") else "re-answered"))
    if counters.get("stale_question"):
        console.print(f"{counters['stale_question']} cached answer(s) were asked another question text than the "
                      "question set's now (stale_question): "
                      + ("left out of this report" if run.get("report_only") else "asked again"))
    if counters.get("question_unchecked"):
        console.print(f"{counters['question_unchecked']} cached answer(s) hold no question text "
                      "(question_unchecked): reused without checking their question; delete them from the cache to "
                      "redo them")
    if counters.get("labels_changed"):
        console.print(f"{counters['labels_changed']} cached answer(s) were written with other gold labels than "
                      f"{run['dataset']} has now: scored with its labels now, not asked again")
    if counters.get("context_unchecked"):
        console.print(f"{counters['context_unchecked']} cached answer(s) predate context hashes (context_unchecked): "
                      "reused without checking their passages; delete them from the cache to redo them")
    console.print(f"report: {report['files']['markdown']} {report['files']['html']} {report['files']['json']}")


def run(args) -> int:
    from icr2_components.errors import UserInputError
    from icr2_components.preflight import check_input_if_present, check_output_folder, check_text_file

    if args.ab_log:
        return _run_ab(args)
    if not args.pipelines:
        raise UserInputError("icr2 compare needs --pipelines NAME ... (or --ab-log PATH to report an online A/B "
                             "log).")
    from icr2_components.stores.index_switch import DEFAULT_INDEX_CONFIG, index_switch_set

    # paths first, before any model or index loads (a FIFO as --dataset would wait for ever)
    check_input_if_present(args.dataset, "--dataset")
    check_text_file(args.question_ids, "--question-ids")
    check_output_folder(args.out, "--out")
    for option, value in [("--index", args.index), ("--backend", args.backend), ("--judge", args.judge),
                          *(("--pipelines", p) for p in args.pipelines)]:
        check_input_if_present(value, option)
    # --index switches every pipeline's IndexRetriever (ICR2_INDEX_CONFIG) for this run, and the data's index
    with index_switch_set(args.index) as switch:
        args.index = switch or DEFAULT_INDEX_CONFIG
        return _run(args)


def _run(args) -> int:
    from icr2_components.backends.pipelines import resolve_backend
    from icr2_components.evaluation.compare.run import run_compare

    if args.dev_offset is not None:
        raise ValueError("--dev-offset is gone: --tune tunes on the first --dev-limit questions of the seeded dev "
                         "split (--split-seed, --dev-fraction) and reports on the test split.")
    if args.tune and args.report_only:
        raise ValueError("--report-only runs no model, and --tune would: run the tuning first, then report.")
    args.dataset = dataset_argument(args)
    backend = resolve_backend(args.backend)
    pipelines = args.pipelines
    split = args.split
    if args.tune:
        pipelines, split = tune(args, backend)
    report = run_compare(pipelines, dataset=args.dataset, context_types=args.context_types, limit=args.limit,
                         out_dir=args.out, max_new_tokens=args.max_new_tokens, index=args.index,
                         progress=not args.no_progress, backend=backend, question_ids=args.question_ids, split=split,
                         split_seed=args.split_seed, dev_fraction=args.dev_fraction, baseline=args.baseline,
                         seed=args.stats_seed, report_only=args.report_only, concurrency=args.concurrency,
                         batch_size=args.batch_size, judge=args.judge, judge_metrics=args.judge_metrics,
                         judge_concurrency=args.judge_concurrency, reuse_prompt_prefix=args.reuse_prompt_prefix)
    print_report(report)
    print_questions(report["run"])
    refuse_if_every_request_failed(report["run"])
    return 0


def dataset_argument(args):
    """``--dataset`` with ``--dataset-format``, ``--field`` and ``--dataset-split``: a path, or a QuestionSet."""
    from icr2_components.kilt.questions import question_source

    fields = {}
    for item in args.field:
        name, sep, column = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--field takes FIELD=COLUMN (e.g. --field answers=gold), got {item!r}.")
        if name.strip() in fields:
            raise ValueError(f"--field {name.strip()} is given twice.")
        fields[name.strip()] = column.strip() or None
    if args.dataset is None and not (args.dataset_format or fields or args.dataset_split):
        return None
    return question_source(args.dataset, args.dataset_format, fields or None, args.dataset_split)


def refuse_if_every_request_failed(run: dict) -> None:
    """A run whose every model request failed (the server down or answering nothing usable) is an error, with the
    reason its failed answers recorded, instead of a report of nothing that exits 0."""
    from collections import Counter

    from icr2_components.evaluation.compare.cache import read_answer_records
    from icr2_components.models.served_model import ServedModelError

    counters = run["counters"]
    if not counters.get("failed_requests") or counters.get("model_runs"):
        return
    hashes = {p["hash"] for p in run["pipelines"].values()}
    ids = set(run["question_ids"])
    reasons = Counter(r["error"] for r in read_answer_records(run["cache"])
                      if r.get("failed_request") and r["pipeline_hash"] in hashes and r["question_id"] in ids)
    reason = reasons.most_common(1)[0][0] if reasons else "no reason recorded"
    raise ServedModelError(f"every one of the {counters['failed_requests']} answers requested failed, none was "
                           f"answered (recorded as failed in {run['cache']}; a re-run asks again): {reason}")


def tune(args, backend) -> tuple[list[str], str | None]:
    """Tune every pipeline on the first --dev-limit ids of the dev split; returns the tuned YAMLs and the split
    to report on (test, unless a question-id file names the questions; compare refuses any dev id there)."""
    from pathlib import Path

    from icr2_components.evaluation.compare.held_out import dataset_split
    from icr2_components.evaluation.compare.tuning import tune_pipeline

    if args.split == "dev":
        raise ValueError("--tune reports on the test split; --split dev would report on the questions it tunes on.")
    if args.dev_limit < 1:
        raise ValueError("--dev-limit must be a positive integer.")
    if args.baseline is not None:  # a wrong name fails before tuning (run_compare checks the tuned names)
        from icr2_components.evaluation.reports.compare_report import resolve_baseline

        resolve_baseline(args.baseline, [Path(p).stem for p in args.pipelines])
    made, _, _ = dataset_split(args.dataset, seed=args.split_seed, dev_fraction=args.dev_fraction)
    dev_ids = made.dev[:args.dev_limit]
    selection = {"split": "dev", "split_seed": args.split_seed, "dev_fraction": args.dev_fraction,
                 "dev_limit": args.dev_limit}
    tuned = [
        tune_pipeline(
            p,
            dataset=args.dataset,
            out_dir=Path(args.out) / "tuning",
            max_new_tokens=args.max_new_tokens,
            index=args.index,
            backend=backend,
            question_ids=dev_ids,
            selection=selection,
        )
        for p in args.pipelines
    ]
    for result in tuned:
        print(f"tuned {result['pipeline']}: {result['best'] or 'nothing tunable'} "
              f"(dev mean BCU {result['best_mean_bcu']}, {result['dev_questions']} questions)")
    return [result["tuned_file"] for result in tuned], (None if args.question_ids else args.split or "test")


def print_questions(run: dict) -> None:
    """Which questions the run used and what it left out (the ids are in run.question_ids_file)."""
    selection = run["selection"]
    parts = [
        f"{run['questions']} questions ({selection['mode']}"
        + (f", {selection['split']['name']} split seed {selection['split']['seed']}" if selection.get("split") else "")
        + f"), ids in {run['question_ids_file']}"
    ]
    if (selection.get("file") or {}).get("unknown"):
        parts.append(f"{selection['file']['unknown']} unknown ids in {selection['file']['path']} left out "
                     f"(e.g. {', '.join(selection['file']['unknown_examples'][:3])})")
    if selection["held_out"]["excluded_probed"]:
        parts.append(f"{selection['held_out']['excluded_probed']} questions left out because a head artifact was "
                     "probed on them")
    if run.get("report_only"):
        parts.append(f"report only: {run['report_only']['complete_questions']} questions answered by every pipeline "
                     f"reported, {run['report_only']['incomplete_questions']} not yet (run without --report-only to "
                     "continue)")
    print("; ".join(parts))


def _run_ab(args) -> int:
    """``icr2 compare --ab-log PATH``: the arms of an online A/B log, printed and written to ``--out``."""
    import json
    from pathlib import Path

    from icr2_components.evaluation.compare.ab_log import compare_ab_log, format_ab_report
    from icr2_components.preflight import check_output_folder

    check_output_folder(args.out, "--out")
    report = compare_ab_log(args.ab_log, labels=args.labels, baseline=args.baseline, seed=args.stats_seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ab_report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(format_ab_report(report))
    print(f"report: {out / 'ab_report.json'}")
    return 0
