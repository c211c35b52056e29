"""``icr2 eval-gate``: adaptive vs. always vs. never retrieval on a RetrievalQA-format JSONL."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    from icr2_components.gates import gate_decider_names
    from icr2_components.stores import retrieval_method_names

    parser = subparsers.add_parser(
        "eval-gate",
        help="evaluate an adaptive-retrieval gate (retrieval rate/accuracy, P/R/F1, answer match) per data source",
        description="Runs the gate on each question of a RetrievalQA-format JSONL (question, ground_truth, optional "
        "context, needs_retrieval, data_source), answers closed-book and with context, and reports adaptive, "
        "always and never retrieval as a table and JSON.",
    )
    parser.add_argument("data", help="RetrievalQA-format JSONL (plain or .gz)")
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

    from icr2_components.evaluation.gate_eval import evaluate_gate, format_summary_table, read_retrievalqa_jsonl
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
        n_no=args.n_no, yes_pool=args.yes_pool, no_pool=args.no_pool, threshold=args.threshold, device=args.device,
    )
    gate.warm_up()
    reader = None if args.decisions_only else LocalChatReader(model=args.model, max_new_tokens=args.max_new_tokens, device=args.device)
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
