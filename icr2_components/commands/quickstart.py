"""``icr2 quickstart``: the first command of the README, end to end on the bundled sample in a few minutes.

1. builds (first run) or opens the embedded index of the bundled KILT sample;
2. answers a few NQ questions with the default pipeline (vanilla RAG);
3. runs a small ``icr2 compare`` of closed-book, vanilla, reordered and oracle and writes the report.
"""

from __future__ import annotations

DEFAULT_PIPELINES = ["closed_book", "vanilla_rag", "reordered_lost_in_the_middle", "oracle"]


def register(subparsers) -> None:
    parser = subparsers.add_parser("quickstart", help="index the sample, answer a few NQ questions, run a small compare")
    parser.add_argument("--questions", type=int, default=3, help="questions answered by the default pipeline (3)")
    parser.add_argument("--compare-questions", type=int, default=5,
                        help="questions in the compare (5: a few minutes on a quiet 2-core CPU)")
    parser.add_argument("--context-types", default="open,gold,conflicting,irrelevant")
    parser.add_argument("--out", default="runs/quickstart", help="report folder (default runs/quickstart)")
    parser.add_argument("--pipelines-dir", default="pipelines")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--backend", help="backend file (backends/*.yaml), e.g. backends/llama_cpp_server.yaml "
                        "(default: ICR2_BACKEND, else the pipelines' own local models)")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from pathlib import Path

    from icr2_components.commands._console import make_console
    from rich.table import Table

    from icr2_components.commands.compare import print_report
    from icr2_components.evaluation.answer_match import answer_match
    from icr2_components.evaluation.compare import run_compare
    from icr2_components.pipeline_spec import PipelineSpec
    from icr2_components.kilt import build_sample, read_kilt_tasks
    from icr2_components.stores import open_index

    if args.questions < 0 or args.compare_questions < 1:
        raise ValueError("--questions must be >= 0 and --compare-questions >= 1.")
    from icr2_components.backends import resolve_backend

    backend = resolve_backend(args.backend)
    console = make_console()
    folder = Path(args.pipelines_dir)
    paths = [folder / f"{name}.yaml" for name in DEFAULT_PIPELINES]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(f"Pipelines not found: {missing}; run from the repository root or set --pipelines-dir.")
    sample = build_sample()
    handle = open_index("indexing/kilt-sample.yaml")
    console.print(f"[bold]1.[/bold] sample index: {handle.count()} passages ({sample.articles} articles, "
                  f"{sample.questions} NQ questions)")
    if args.questions:
        spec = PipelineSpec.from_file(str(folder / "vanilla_rag.yaml"), backend=backend)
        table = Table(title=f"2. vanilla RAG on {args.questions} NQ questions")
        for column in ("question", "answer", "gold", "match", "s"):
            table.add_column(column)
        tasks = [t for t in read_kilt_tasks(sample.tasks, limit=args.questions * 3) if t.answers][: args.questions]
        for task in tasks:
            result = spec.run(task.input, None, controlled=False, max_new_tokens=args.max_new_tokens)
            table.add_row(task.input, result["answer"], " | ".join(task.answers[:3]),
                          "yes" if answer_match(result["answer"], task.answers) else "no", f"{result['latency_s']:.1f}")
        console.print(table)
    console.print(f"[bold]3.[/bold] compare of {', '.join(DEFAULT_PIPELINES)} on {args.compare_questions} questions")
    report = run_compare([str(p) for p in paths], limit=args.compare_questions, context_types=args.context_types,
                         out_dir=args.out, max_new_tokens=args.max_new_tokens, progress=not args.no_progress, backend=backend)
    print_report(report)
    return 0
