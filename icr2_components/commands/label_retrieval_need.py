"""``icr2 label-retrieval-need``: per question, whether retrieval changed the reader's outcome (RetrievalQA's
per-model need labels), resumable, with the counts."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "label-retrieval-need",
        help="answer questions closed-book and with context; label which ones need retrieval for this reader",
        description="Answers each question closed-book (RetrievalQA Fig. 7) and with its gold or retrieved passages "
        "(Fig. 8) with one reader, and appends per question both answers, both answer matches and the outcome "
        "(context_only = needs retrieval; both_right, closed_book_only = no need; both_wrong per --both-wrong) to "
        "OUT (a JSONL that is also the cache: a re-run skips what is done). Prints and writes the counts "
        "(OUT.counts.json).",
    )
    parser.add_argument("--out", required=True, help="labels JSONL (appended; resumable)")
    parser.add_argument("--nq-ids", action="append", default=[], metavar="FILE",
                        help="question-id file of NQ-sample questions (repeatable)")
    parser.add_argument(
        "--nq-range",
        action="append",
        default=[],
        metavar="START:END",
        help="NQ-sample questions at these 0-based positions of the task file, end excluded (repeatable)",
    )
    parser.add_argument(
        "--exclude-ids",
        action="append",
        default=[],
        metavar="FILE",
        help="leave out the ids of this file (e.g. bench/data/heldout_nq_ids.txt), counted (repeatable)",
    )
    parser.add_argument("--retrievalqa", action="append", default=[], metavar="JSONL",
                        help="RetrievalQA-format JSONL, e.g. bench/data/gate_eval.jsonl (repeatable)")
    parser.add_argument(
        "--dataset", default=None, help="KILT task file of --nq-ids/--nq-range (default: the NQ sample)"
    )
    parser.add_argument("--context", default="gold", choices=("gold", "retrieved"),
                        help="NQ passages: the gold ones (default) or the index's top passages")
    parser.add_argument("--index", default="kilt-sample",
                        help="index config: NQ gold passages, retrieved passages, and the passages of RetrievalQA "
                        "questions without context ('none' to skip those, counted)")
    parser.add_argument("--retrieval-method", default="bm25", help="retrieval method of --context retrieved")
    parser.add_argument("--max-passages", type=int, default=2, help="passages shown with the question (default 2)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="in-process reader (alias, path or HF id)")
    parser.add_argument("--backend", default=None, help="backend file (backends/*.yaml): the reader follows it "
                        "(a served model, or another local one) instead of --model")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="questions answered at once by a served --backend (default: the backend file's "
                        "max_concurrency, else its kind's default); the labels file is that of a sequential run")
    parser.add_argument("--max-new-tokens", type=int, default=24, help="answer budget (default 24)")
    parser.add_argument(
        "--both-wrong",
        default="no_need",
        choices=("no_need", "exclude"),
        help="label of questions the reader gets wrong both ways (default no_need; recorded either way)",
    )
    parser.add_argument("--limit", type=int, default=None, help="at most N questions of each input (a quick look)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from rich.table import Table

    from icr2_components.commands._console import make_console
    from icr2_components.evaluation.gates.need_labels import (
        OUTCOMES,
        label_questions,
        nq_question_ids,
        nq_questions,
        reader_for,
        retrievalqa_questions,
    )
    from icr2_components.preflight import (
        check_device,
        check_input,
        check_input_if_present,
        check_output_file,
        check_text_file,
    )

    for option, files in (("--nq-ids", args.nq_ids), ("--exclude-ids", args.exclude_ids)):
        for ids_file in files:
            check_text_file(ids_file, option)
    for jsonl in args.retrievalqa:
        check_input(jsonl, "--retrievalqa", folder=False)
    check_input(args.dataset, "--dataset", folder=False)
    check_input_if_present(args.backend, "--backend")
    check_output_file(args.out, "--out")
    check_device(args.device, "--device")
    console = make_console()
    if not (args.nq_ids or args.nq_range or args.retrievalqa):
        raise ValueError("Name the questions: --nq-ids FILE, --nq-range START:END and/or --retrievalqa JSONL.")
    if args.max_passages < 1:
        raise ValueError(f"--max-passages must be a positive integer, got {args.max_passages}.")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be a positive integer, got {args.limit}.")
    index = None if str(args.index).lower() == "none" else args.index
    from icr2_components.backends.pipelines import request_concurrency, resolve_backend

    slots = request_concurrency(resolve_backend(args.backend) if args.backend else None, args.concurrency)
    reader, reader_key = reader_for(args.model, args.backend, args.max_new_tokens, args.device)
    questions, inputs = [], {}
    if args.nq_ids or args.nq_range:
        if index is None:
            raise ValueError("NQ-sample questions take their passages from an index: give --index (e.g. "
                             "indexing/kilt-sample.yaml).")
        ids, described = nq_question_ids(args.nq_ids, args.nq_range, args.exclude_ids, args.dataset)
        ids = ids[: args.limit] if args.limit else ids
        read, skips = nq_questions(ids, args.dataset, index, args.context, args.max_passages, args.retrieval_method)
        questions += read
        inputs["nq-sample"] = {**described, "used": len(read), "skips": skips.as_dict()}
        console.print(f"NQ-sample: {len(read)} questions ({described['excluded_held_out']} held-out ids left out, "
                      f"{described['unknown']} unknown ids); {skips.summary()}")
    for path in args.retrievalqa:
        read, skips = retrievalqa_questions(path, index, args.max_passages, args.retrieval_method, args.limit)
        questions += read
        inputs[path] = {"used": len(read), "retrieved_context": sum(q.context_kind == "retrieved" for q in read),
                        "skips": skips.as_dict()}
        console.print(f"{path}: {len(read)} questions; {skips.summary()}")
    seen, unique = set(), []
    for question in questions:
        if question.id not in seen:
            seen.add(question.id)
            unique.append(question)
    if len(unique) < len(questions):
        console.print(f"left out {len(questions) - len(unique)} repeated question id(s)")
    if not unique:
        raise ValueError("No question left to label (see the counts above).")
    result = label_questions(unique, reader, reader_key, args.out, args.both_wrong, progress=not args.no_progress,
                             concurrency=slots)
    result["inputs"] = inputs
    with open(f"{args.out}.counts.json", "w") as handle:
        json.dump(result, handle, indent=2)
    table = Table(title=f"retrieval need for {reader_key} ({result['answered_now']} answered now, "
                        f"{result['cached']} from {args.out})")
    columns = ("questions", *OUTCOMES, "needs_retrieval", "no_need", "excluded")
    table.add_column("source")
    for column in columns:
        table.add_column(column, justify="right")
    for source, counts in result["counts"].items():
        table.add_row(source, *(str(counts[c]) for c in columns))
    console.print(table)
    if result["mean_seconds_per_question"] is not None:
        console.print(f"mean {result['mean_seconds_per_question']:.2f} s per question (two answers), over the "
                      "questions of this file that recorded it")
    console.print(f"wrote {args.out} and {args.out}.counts.json (both_wrong -> {args.both_wrong})")
    return 0
