"""``icr2 quickstart``: the first command of the README, end to end on the bundled sample in a few minutes.

1. opens (building on first use) the embedded index of the bundled KILT sample;
2. does context help? closed-book, vanilla RAG and the oracle (the gold passage) answer the same NQ questions
   (40 by default): a few example answers, answer match, token F1, latency and prompt tokens, each with its 95%
   interval, and the report's paired section against closed-book (the paired difference with its interval, the
   exact McNemar test Holm-adjusted across the pipelines, the verdict, the share of the closed-book -> oracle gap
   vanilla RAG closes);
3. how do the techniques use context? CUB's gold, conflicting and irrelevant contexts on a few questions
   (5 by default, a demo of the report, not a result) for the same pipelines and the lost-in-the-middle reorderer:
   faithfulness and robustness with their intervals, and the Pareto plot (with error bars).

The pipelines are the library's YAMLs with two quickstart settings, written to ``<out>/pipelines/`` (the file
says what changed): at most ``--top-k`` retrieved passages (3: short prompts), and a short-answer instruction
as the system message of the corpus-in-context prompt (the closed-book prompt already asks for a concise
answer). Answers get ``--max-new-tokens`` (32: given 48, every SmolLM2 oracle answer on the first 20 sample
questions that matched had matched by its 25th token; a 16-token cap cut a quarter to a third of them before the
answer). Step 2 at 40 questions and step 3 at 5 take about 7 minutes on a quiet 2-core CPU.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

CONTEXT_PIPELINES = ["closed_book", "vanilla_rag", "oracle"]
CUB_PIPELINES = ["closed_book", "vanilla_rag", "reordered_lost_in_the_middle", "oracle"]
CUB_CONTEXT_TYPES = "gold,conflicting,irrelevant"
SHORT_ANSWER_PROMPT = "Answer with a short phrase of a few words, not a full sentence."
NEXT_STEPS = ("Next: a bigger model. On your own LLM server (vLLM, llama.cpp, Ollama, OpenAI): `icr2 quickstart "
              "--backend backends/vllm.yaml` (README 'Use your own LLM server'); or locally, a backend file with "
              "`kind: local` and `model: HuggingFaceTB/SmolLM2-1.7B-Instruct`.")
_RETRIEVER_TYPE = "IndexRetriever"
_PROMPT_TYPE = "CorpusInContextPromptBuilder"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "quickstart", help="index the sample; closed-book vs RAG vs oracle on 40 NQ questions with 95%% intervals "
        "and a paired test; a small CUB compare with its Pareto plot")
    parser.add_argument("--questions", type=int, default=3, help="example answers shown (3)")
    parser.add_argument("--compare-questions", type=int, default=40,
                        help="questions in step 2, closed-book vs RAG vs oracle (40: about 4 minutes on a quiet "
                        "2-core CPU; enough for the oracle's gain to be significant)")
    parser.add_argument("--cub-questions", type=int, default=5,
                        help="questions in step 3, the CUB context types (5: about 2 minutes; a demo of the report)")
    parser.add_argument("--top-k", type=int, default=3, help="most passages retrieved per question (3)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="answer budget in tokens (32)")
    parser.add_argument("--out", default="runs/quickstart", help="report folder (default runs/quickstart)")
    parser.add_argument("--pipelines-dir", default=None,
                        help="a folder of pipeline YAMLs of your own (default: the shipped pipelines)")
    parser.add_argument("--backend", help="backend file (backends/*.yaml), e.g. backends/llama_cpp_server.yaml "
                        "(default: ICR2_BACKEND, else the pipelines' own local models)")
    parser.add_argument("--index", metavar="CONFIG",
                        help="index config the pipelines retrieve from, e.g. indexing/kilt-sample-elasticsearch.yaml "
                        "(build it first with `icr2 index --config CONFIG`; default: ICR2_INDEX_CONFIG, else the "
                        "embedded indexing/kilt-sample.yaml)")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(handler=run)


def quickstart_variant(data: dict[str, Any], top_k: int, system_prompt: str) -> tuple[dict[str, Any], list[str]]:
    """A copy of a pipeline dict with the quickstart settings, and what changed: every ``IndexRetriever``'s
    ``top_k`` capped at ``top_k``, and ``system_prompt`` given to every ``CorpusInContextPromptBuilder`` that has
    none."""
    variant = copy.deepcopy(data)
    changes = []
    for name, component in (variant.get("components") or {}).items():
        kind = str(component.get("type", "")).rsplit(".", 1)[-1]
        parameters = component.setdefault("init_parameters", {})
        if kind == _RETRIEVER_TYPE and parameters.get("top_k", top_k + 1) > top_k:
            changes.append(f"{name}.top_k {parameters.get('top_k', 'default')} -> {top_k}")
            parameters["top_k"] = top_k
        if kind == _PROMPT_TYPE and not parameters.get("system_prompt"):
            parameters["system_prompt"] = system_prompt
            changes.append(f"{name}.system_prompt: {system_prompt!r}")
    return variant, changes


def write_variants(names: list[str], pipelines_dir: Path | None, out_dir: Path, top_k: int) -> list[str]:
    """Write the quickstart variant of each named pipeline to ``out_dir``; returns their paths."""
    import yaml

    from icr2_components.resources import shipped_file

    # the shipped pipelines (from the installed package, any folder) unless --pipelines-dir names a folder of one's own
    paths = [pipelines_dir / f"{name}.yaml" if pipelines_dir is not None else shipped_file("pipelines", name)
             for name in names]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(f"Pipelines not found: {missing}; check --pipelines-dir.")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    from icr2_components.stores.index_switch import apply_index_switch

    for path in paths:
        variant, changes = quickstart_variant(yaml.safe_load(path.read_text()), top_k, SHORT_ANSWER_PROMPT)
        variant, switched = apply_index_switch(variant)  # --index / ICR2_INDEX_CONFIG, written into the copy
        changes += switched
        header = (
            f"# Written by `icr2 quickstart` from {path}: " + ("; ".join(changes) if changes else "unchanged") + "\n"
        )
        target = out_dir / path.name
        target.write_text(header + yaml.safe_dump(variant, sort_keys=False, allow_unicode=True))
        written.append(str(target))
    return written


def paired_summary(report: dict, pipeline: str = "oracle", baseline: str = "closed_book",
                   context_type: str = "open") -> str:
    """One sentence from the report's paired section: both answer-match rates with their 95% intervals, the paired
    difference with its interval, the exact McNemar test on the same questions (Holm-adjusted across the
    pipelines compared with the baseline) and the verdict."""
    from icr2_components.evaluation.reports.rendering import format_difference, format_p_value
    from icr2_components.evaluation.statistics.intervals import format_interval

    paired = report.get("paired") or {}
    test = next((c for c in paired.get("comparisons", []) if c["pipeline"] == pipeline
                 and c["baseline"] == baseline and c["context_type"] == context_type
                 and c["metric"] == "answer_match"), None)
    if test is None:
        return f"No paired result for {pipeline} vs {baseline} ({context_type}): neither answered the same question."
    rates = []
    for name in (pipeline, baseline):
        row = report["summary"][name][context_type]
        rates.append(f"{name} {format_interval(row['intervals']['answer_match'])} (n={row['n']})")
    family = test["family_size"]
    outcome = (f"{pipeline} is {test['verdict']} than {baseline}" if test["verdict"] in ("better", "worse")
               else test["verdict"])
    return (f"Answer match [95% CI], {rates[0]} vs {rates[1]}. On the same {test['n']} questions {pipeline} alone is "
            f"right on {test['only_pipeline']}, {baseline} alone on {test['only_baseline']}: difference "
            f"{format_difference(test['difference'], 'answer_match')}, exact McNemar p = "
            f"{format_p_value(test['p_value'])} (Holm-adjusted over the {family} pipeline{'s' if family > 1 else ''} "
            f"compared with {baseline}: {format_p_value(test['p_holm'])}): {outcome}.")


def example_rows(records: list[dict], pipelines: list[str], count: int) -> tuple[list[str], list[list[str]]]:
    """The first ``count`` questions' whole answers, one column per pipeline ("+" marks an answer match)."""
    from icr2_components.evaluation.metrics.answer_match import answer_match

    by_question: dict[str, dict[str, dict]] = {}
    for record in records:
        by_question.setdefault(record["question_id"], {})[record["pipeline"]] = record
    rows = []
    for answers in list(by_question.values())[:count]:
        first = next(iter(answers.values()))
        row = [first["query"], " | ".join(first["answers"][:2])]
        for name in pipelines:
            record = answers.get(name)
            if record is None:
                row.append("-")
                continue
            text = " ".join(record["answer"].split())
            row.append(("+ " if answer_match(record["answer"], record["answers"]) else "  ") + text)
        rows.append(row)
    return ["question", "gold", *pipelines], rows


def run(args) -> int:
    from icr2_components.preflight import check_input_if_present, check_output_folder
    from icr2_components.stores.index_switch import DEFAULT_INDEX_CONFIG, index_switch_set

    check_output_folder(args.out, "--out")
    check_input_if_present(args.backend, "--backend")
    check_input_if_present(getattr(args, "index", None), "--index")

    with index_switch_set(getattr(args, "index", None)) as switch:  # ICR2_INDEX_CONFIG for every pipeline
        return _run(args, switch or DEFAULT_INDEX_CONFIG)


def _run(args, index: str) -> int:
    import time

    from icr2_components.commands._console import make_console
    from icr2_components.commands.compare import print_table
    from icr2_components.evaluation.compare.cache import read_answer_records
    from icr2_components.evaluation.compare.run import run_compare
    from icr2_components.evaluation.reports.rendering import cub_rows, gap_rows, paired_rows, summary_rows
    from icr2_components.kilt import build_sample
    from icr2_components.stores import open_index

    for flag, value, least in (("--questions", args.questions, 0), ("--compare-questions", args.compare_questions, 1),
                               ("--cub-questions", args.cub_questions, 0), ("--top-k", args.top_k, 1),
                               ("--max-new-tokens", args.max_new_tokens, 1)):
        if value < least:
            raise ValueError(f"{flag} must be >= {least}, got {value}.")
    from icr2_components.backends.pipelines import resolve_backend

    backend = resolve_backend(args.backend)
    started = time.perf_counter()
    console = make_console()
    out = Path(args.out)
    names = list(dict.fromkeys(CONTEXT_PIPELINES + CUB_PIPELINES))
    own_dir = Path(args.pipelines_dir) if args.pipelines_dir else None
    written = dict(zip(names, write_variants(names, own_dir, out / "pipelines", args.top_k), strict=True))
    sample = build_sample()
    handle = open_index(index)
    console.print(
        f"[bold]1.[/bold] sample index ({handle.backend.describe()}): {handle.count()} passages ({sample.articles} "
        "articles, "
        f"{sample.questions} NQ questions); pipelines with at most {args.top_k} passages and a "
        f"short-answer prompt, answers up to {args.max_new_tokens} tokens: {out / 'pipelines'}"
    )

    console.print(f"[bold]2.[/bold] does context help? {', '.join(CONTEXT_PIPELINES)} on the same "
                  f"{args.compare_questions} NQ questions")
    context_out = out / "context"
    report = run_compare([written[n] for n in CONTEXT_PIPELINES], limit=args.compare_questions, context_types="open",
                         out_dir=context_out, max_new_tokens=args.max_new_tokens, progress=not args.no_progress,
                         backend=backend, baseline="closed_book", index=index)
    truncated = report["run"]["counters"].get("truncated", 0)
    if truncated:
        console.print(f"{truncated} of {report['run']['counters']['model_runs']} answers were cut at the budget of "
                      f"{args.max_new_tokens} tokens (--max-new-tokens raises it)")
    if args.questions:
        records = [r for r in read_answer_records(context_out / "answers.jsonl")
                   if r["context_type"] == "open" and r["pipeline"] in CONTEXT_PIPELINES]
        print_table(console, "example answers (+: contains a gold answer)",
                    *example_rows(records, CONTEXT_PIPELINES, args.questions))
    print_table(console, "answer match (open context): mean [95% interval]",
                *summary_rows(report, metrics=("answer_match", "token_f1", "latency_s", "prompt_tokens")))
    print_table(console, "against closed-book on the same questions (exact McNemar, Holm across the pipelines)",
                *paired_rows(report, metrics=("answer_match",)))
    if report["paired"]["gap_closed"].get("results"):
        print_table(console, "share of the closed-book -> oracle gap closed", *gap_rows(report))
    console.print(paired_summary(report))
    console.print(f"report: {report['files']['html']} (and .md, .json)")

    if args.cub_questions:
        console.print(f"[bold]3.[/bold] how do they use context? CUB {CUB_CONTEXT_TYPES} contexts, "
                      f"{', '.join(CUB_PIPELINES)} on {args.cub_questions} questions (a demo of the report: too few "
                      f"questions for conclusions)")
        cub = run_compare([written[n] for n in CUB_PIPELINES], limit=args.cub_questions,
                          context_types=CUB_CONTEXT_TYPES, out_dir=out / "cub", max_new_tokens=args.max_new_tokens,
                          progress=not args.no_progress, backend=backend, baseline="closed_book", index=index)
        print_table(console, "faithfulness / robustness (CUB BCU) [95% interval]", *cub_rows(cub))
        console.print(f"report: {cub['files']['html']}; Pareto plot: {cub['files'].get('pareto_png', '-')}")
    minutes, seconds = divmod(round(time.perf_counter() - started), 60)
    console.print(f"done in {minutes}m{seconds:02d}s")
    console.print(NEXT_STEPS)
    return 0
