"""``icr2 build-benchmark``: KILT tasks + an index + retrievers -> an ICR2-format JSONL, with Table 7 statistics."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    from icr2_components.stores.retrieval_methods import retrieval_method_names

    parser = subparsers.add_parser(
        "build-benchmark",
        help="build an ICR2 corpus-in-context benchmark (gold passages among retrieved confounders)",
    )
    parser.add_argument("--tasks", help="KILT task file (default: the bundled NQ sample)")
    parser.add_argument("--index", default="kilt-sample", help="index config: a shipped name or a YAML path")
    parser.add_argument(
        "--retrievers",
        default="bm25,dense,hybrid",
        help=f"comma-separated retrieval methods ({', '.join(retrieval_method_names())}), pooled in this order "
        "(default: bm25,dense,hybrid)",
    )
    parser.add_argument("--top-k", type=int, default=200, help="passages per retriever (ICR2 uses 200)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget-tokens", type=int, help="corpus size in reader tokens (default 6000)")
    budget.add_argument("--budget-passages", type=int, help="corpus size in passages, gold included")
    parser.add_argument("--ratio", type=float, default=1.0, help="confounding ratio p in [0, 1] (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, help="build at most this many instances")
    parser.add_argument("--task-type", choices=["qa", "fact_verification", "dialogue"],
                        help="ICR2 template (default: guessed from the task file name)")
    parser.add_argument("--tokenizer", default="smollm2-135m-instruct",
                        help="the reader's tokenizer, for the token budget and the prompt token counts")
    parser.add_argument("--retrieve-with-query-only", action="store_true",
                        help="retrieve with the query alone (ICR2 appends the answers)")
    parser.add_argument("--out", required=True, help="output JSONL path")
    parser.add_argument("--summary", help="also write the summary (statistics, skips) as JSON here")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from rich.table import Table

    from icr2_components.builders.benchmark import build_icr2_benchmark
    from icr2_components.commands._console import make_console
    from icr2_components.kilt import build_sample
    from icr2_components.kilt.icr2_benchmark import GoldPassageLookup, infer_task_type
    from icr2_components.kilt.tasks import read_kilt_tasks
    from icr2_components.preflight import check_input, check_input_if_present, check_output_file
    from icr2_components.records import SkipReport
    from icr2_components.stores import open_index
    from icr2_components.stores.config import corpus_path
    from icr2_components.stores.retrieval_methods import retrieval_method_names

    check_input(args.tasks, "--tasks", folder=False)
    check_input_if_present(args.index, "--index")
    check_output_file(args.out, "--out")
    check_output_file(args.summary, "--summary")
    methods = [m.strip() for m in args.retrievers.split(",") if m.strip()]
    unknown = [m for m in methods if m not in retrieval_method_names()]
    if not methods or unknown:
        raise ValueError(
            f"--retrievers takes a comma-separated list of {retrieval_method_names()}; got {args.retrievers!r}."
        )
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be a positive integer.")
    budget_tokens = args.budget_tokens
    if budget_tokens is None and args.budget_passages is None:
        budget_tokens = 6000
    tasks_path = args.tasks or str(build_sample().tasks)
    task_type = args.task_type or infer_task_type(tasks_path)

    handle = open_index(args.index)
    task_skips = SkipReport(source=tasks_path)
    tasks = list(read_kilt_tasks(tasks_path, skips=task_skips, limit=args.limit))
    needed = {p.wikipedia_id for task in tasks for p in task.provenance}
    config = handle.config
    lookup = GoldPassageLookup.from_knowledge_source(
        corpus_path(config), wikipedia_ids=needed, passage_words=config.corpus.passage_words
    )
    retrieve = {m: (lambda query, k, m=m: handle.retrieve(query, method=m, top_k=k)) for m in methods}
    summary = build_icr2_benchmark(
        tasks,
        retrieve,
        handle.random_documents if args.ratio < 1 else None,
        lookup,
        args.out,
        task_type=task_type,
        budget_tokens=budget_tokens,
        budget_passages=args.budget_passages,
        confounding_ratio=args.ratio,
        seed=args.seed,
        top_k=args.top_k,
        tokenizer=args.tokenizer,
        query_with_answer=not args.retrieve_with_query_only,
        progress=not args.no_progress,
    )

    stats = summary.statistics
    console = make_console()
    table = Table(title=f"ICR2 statistics (Table 7): {summary.written} instances -> {summary.path}")
    for column in ("task", "#CTX", "#Tokens", "#Prov", "budget", "p", "retrievers"):
        table.add_column(column)
    budget_text = f"{budget_tokens} tokens" if budget_tokens is not None else f"{args.budget_passages} passages"
    tokens = f"{stats['tokens']:,.0f}" if stats["tokens"] is not None else "-"
    table.add_row(task_type, f"{stats['ctx']:.1f}", tokens, f"{stats['prov']:.2f}", budget_text, f"{args.ratio:g}",
                  ",".join(methods))
    console.print(table)
    console.print(f"confounders dropped: {json.dumps(summary.dropped, sort_keys=True)}")
    console.print(f"filling stopped by: {json.dumps(summary.stop_reasons, sort_keys=True)}")
    if task_skips.total:
        console.print(task_skips.summary())
    if summary.skips["total"]:
        console.print(f"instances skipped: {json.dumps(summary.skips['counts'])}")
    if args.summary:
        with open(args.summary, "w") as out:
            json.dump({**summary.as_dict(), "task_file_skips": task_skips.as_dict()}, out, indent=2)
    return 0
