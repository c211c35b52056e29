"""``icr2 eval-gate``: adaptive vs. always vs. never retrieval on a RetrievalQA-format JSONL; with ``--labels``, every
method (always, never, vanilla, TA-ARE, calibrated threshold, learned) on need-for-retrieval labels, with the
trade-off curve, intervals and paired tests against always-retrieve."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    from icr2_components.gates.gate_decider import gate_decider_names
    from icr2_components.stores.retrieval_methods import retrieval_method_names

    parser = subparsers.add_parser(
        "eval-gate",
        help="evaluate an adaptive-retrieval gate (retrieval rate/accuracy, P/R/F1, answer match) per data source",
        description="Runs the gate on each question of a RetrievalQA-format JSONL (question, ground_truth, optional "
        "context, needs_retrieval, data_source), answers closed-book and with context, and reports adaptive, "
        "always and never retrieval as a table and JSON. With --labels (files of icr2 label-retrieval-need) it "
        "instead runs every gate of --methods on those questions, answers nothing (the labels hold both answers), "
        "and reports each method's retrieval rate, answer match, objective (answer match - COST x retrieval rate) "
        "and AUROC with 95%% intervals, paired tests against always-retrieve (Holm), and the trade-off curve of "
        "every scored method over every threshold (table, JSON, PNG in --out-dir).",
    )
    parser.add_argument("data", nargs="?", help="RetrievalQA-format JSONL (plain or .gz); not with --labels")
    parser.add_argument("--labels", nargs="+", default=None, metavar="LABELS",
                        help="labels JSONL file(s) of icr2 label-retrieval-need: compare --methods on them")
    parser.add_argument("--methods", default="always,never,vanilla,ta_are",
                        help="with --labels: comma-separated gate methods; threshold=ARTIFACT and learned=ARTIFACT "
                        "read artifacts of icr2 train-gate; name:method=ARTIFACT names one")
    parser.add_argument("--cost", type=float, default=0.1, help="with --labels: lambda of the objective (default 0.1)")
    parser.add_argument("--both-wrong", default="no_need", choices=("no_need", "exclude"),
                        help="with --labels: label of questions wrong both ways (AUROC only)")
    parser.add_argument("--out-dir", default=None, help="with --labels: write tradeoff.json, tradeoff.png, curves.md "
                        "and explore.html (every question with each method's decision and answer)")
    parser.add_argument("--backend", default=None, help="with --labels: backend file whose model the asking gates "
                        "(vanilla, ta_are, threshold) use; a served one gives P(yes) from top log-probabilities")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="with --labels and a served --backend: questions the gate asks at once (default: the "
                        "backend file's max_concurrency, else its kind's default); decisions are those of a "
                        "sequential run")
    parser.add_argument("--show-curves", action="store_true", help="with --labels: print every curve point")
    parser.add_argument("--seed", type=int, default=0, help="with --labels: bootstrap and permutation seed")
    parser.add_argument("--claim", default=None, metavar="METHOD",
                        help="with --labels: the one method named in advance as beating TA-ARE and the vanilla prompt; "
                        "reports whether it beats both by AUROC and by the objective (intersection-union test: each "
                        "p < 0.05 with its interval above 0), as 'claim' in the JSON")
    parser.add_argument("--method", default="ta_are", choices=gate_decider_names(),
                        help="the gate's method: a registered gate decider (icr2_components/gates/deciders/)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="gate and reader model (alias, path or HF id)")
    parser.add_argument("--today", default=None, help="ISO date written in the TA-ARE prompt (default: today)")
    parser.add_argument("--no-date", action="store_true", help="TA-ARE without the date line (the paper's ablation)")
    parser.add_argument("--yes-pool", default="default", help="JSONL pool of [Yes] demonstrations")
    parser.add_argument("--no-pool", default="default", help="JSONL pool of [No] demonstrations")
    parser.add_argument("--n-yes", type=int, default=2)
    parser.add_argument("--n-no", type=int, default=2)
    parser.add_argument("--threshold", type=float, default=0.5, help="P(yes) threshold of the 'threshold' method")
    parser.add_argument(
        "--artifact", default=None, help="gate artifact of icr2 train-gate (methods threshold, learned)"
    )
    parser.add_argument("--limit", type=int, default=None, help="evaluate the first N usable questions")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="answer length budget of the reader")
    parser.add_argument("--decisions-only", action="store_true", help="score the gate's decisions, generate no answers")
    parser.add_argument("--index", default=None, help="index config used to retrieve for questions without context "
                        "(e.g. indexing/kilt-sample.yaml)")
    parser.add_argument("--retrieval-method", default="hybrid", choices=retrieval_method_names())
    parser.add_argument("--top-k", type=int, default=5, help="passages in the with-retrieval prompt")
    parser.add_argument("--device", default=None)
    parser.add_argument("--output", default=None, help="write the JSON report here")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from icr2_components.commands._console import make_console
    from icr2_components.preflight import (
        check_device,
        check_input,
        check_input_if_present,
        check_output_file,
        check_output_folder,
    )

    check_input(args.data, "data", folder=False)
    for label_file in args.labels or []:
        check_input(label_file, "--labels", folder=False)
    check_input_if_present(args.index, "--index")
    check_input_if_present(args.backend, "--backend")
    check_output_folder(args.out_dir, "--out-dir")
    check_output_file(args.output, "--output")
    check_device(args.device, "--device")
    if args.labels:
        if args.data:
            raise ValueError("Give either a RetrievalQA JSONL or --labels files, not both.")
        return run_on_labels(args)
    if not args.data:
        raise ValueError("Name a RetrievalQA-format JSONL, or --labels files of icr2 label-retrieval-need.")

    from icr2_components.evaluation.gates.gate_eval import evaluate_gate, format_summary_table, read_retrievalqa_jsonl
    from icr2_components.gates import TimeAwareRetrievalGate
    from icr2_components.readers import LocalChatReader

    # A wide console when piped or captured, so the table is not squeezed into 80 columns.
    console = make_console()
    records, record_skips = read_retrievalqa_jsonl(args.data, limit=args.limit)
    console.print(record_skips.summary())
    if not records:
        raise ValueError(f"{args.data} has no usable question (see the skips above).")
    gate = TimeAwareRetrievalGate(
        method=args.method, model=args.model, today=args.today, time_aware=not args.no_date, n_yes=args.n_yes,
        n_no=args.n_no, yes_pool=args.yes_pool, no_pool=args.no_pool, threshold=args.threshold,
        model_settings={"device": args.device}, artifact=args.artifact,
    )
    gate.warm_up()
    reader = (
        None
        if args.decisions_only
        else LocalChatReader(model=args.model, max_new_tokens=args.max_new_tokens, device=args.device)
    )
    retriever = None
    if args.index and not args.decisions_only:
        from icr2_components.retrievers import IndexRetriever

        retriever = IndexRetriever(index=args.index, method=args.retrieval_method, top_k=args.top_k)
    report = evaluate_gate(records, gate, reader=reader, retriever=retriever, top_k=args.top_k,
                           answer=not args.decisions_only)
    report["data"] = str(args.data)
    report["input_skips"] = record_skips.as_dict()
    report["settings"] = {key: value for key, value in vars(args).items() if key != "handler"}
    console.print(format_summary_table(report["summary"], title=f"eval-gate: {args.method} on {Path(args.data).name}"))
    for name, pool_report in report["gate"]["pool_skips"].items():
        if pool_report.get("total"):
            console.print(f"{name}: skipped {pool_report['total']} lines {pool_report['counts']}")
    if report["skips"]["total"]:
        console.print(f"evaluation skips: {report['skips']['counts']}")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(report, indent=2, ensure_ascii=False))
        console.print(f"wrote {args.output}")
    return 0


def run_on_labels(args: argparse.Namespace) -> int:
    from icr2_components.commands._console import make_console
    from icr2_components.evaluation.gates.gate_methods import gate_model_settings, parse_methods, run_methods
    from icr2_components.evaluation.gates.gate_tradeoff import (
        format_comparison_table,
        format_curve_table,
        format_reference_table,
    )
    from icr2_components.evaluation.gates.need_labels import read_labels
    from icr2_components.evaluation.reports.gate_report import (
        build_gate_report,
        check_claim_methods,
        format_claim,
        report_curves,
        write_gate_report,
    )

    console = make_console()
    specs = parse_methods(args.methods)
    check_claim_methods(specs, args.claim)
    labelled, described = read_labels(args.labels, args.both_wrong)
    if args.limit is not None:
        labelled = labelled[: args.limit]
    if not labelled:
        raise ValueError(f"{args.labels} hold no labelled question; run icr2 label-retrieval-need first.")
    console.print(
        f"{len(labelled)} labelled questions of {described['reader']}; counts {described['counts'].get('all')}"
    )
    if described["unreadable_lines"]:
        console.print(
            f"[yellow]label lines not read[/]: {described['skipped']} (examples in the report's labels.skips)"
        )
    from icr2_components.backends.pipelines import request_concurrency, resolve_backend

    slots = request_concurrency(resolve_backend(args.backend) if args.backend else None, args.concurrency)
    model, gate_options = gate_model_settings(args.model, args.backend)
    runs = run_methods(specs, labelled, model=model, today=args.today, device=args.device, gate_options=gate_options,
                       concurrency=slots)
    for name, run in runs.items():
        if run["unscored"]:
            console.print(f"{name}: {run['unscored']} decision(s) without P(yes): no curve or AUROC for it")
    report = build_gate_report(runs, labelled, described, cost=args.cost, seed=args.seed, claim=args.claim,
                               settings={k: v for k, v in vars(args).items() if k != "handler"})
    title = f"gates on {len(labelled)} labelled questions, reader {described['reader']}"
    console.print(format_comparison_table(report["all"], title))
    if report["all"]["versus_references"]:
        console.print(format_reference_table(report["all"], "against the reference gates (TA-ARE, vanilla prompt)"))
    if "claim" in report:
        console.print(format_claim(report["claim"]))
    for source, comparison in report["by_source"].items():
        console.print(format_comparison_table(comparison, f"{source} ({comparison['questions']} questions)"))
    if args.show_curves:
        for name, curve in report_curves(report).items():
            console.print(format_curve_table(name, curve))
    if args.out_dir:
        from icr2_components.evaluation.reports.interactive_page import write_gate_page

        written = write_gate_report(report, args.out_dir, title=title, cost=args.cost)
        written.append(write_gate_page(report, args.out_dir))  # explore.html, from the label files
        console.print(f"wrote {', '.join(map(str, written[:-1]))} and {written[-1]}")
    return 0
