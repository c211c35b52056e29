"""``icr2 train-gate LABELS --kind threshold|logistic|knn --out ARTIFACT``: a calibrated or learned gate."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train-gate",
        help="calibrate the threshold gate or learn a gate from need-for-retrieval labels; writes a gate artifact",
        description="Reads labels of icr2 label-retrieval-need and writes a gate artifact (JSON; a knn gate adds a "
        ".npz of its vectors) that a pipeline's gate reads with `artifact:` (method threshold or learned). The cut "
        "maximises answer match - COST x retrieval rate on these (dev) questions. Training questions listed in a "
        "--held-out file are refused.",
    )
    parser.add_argument("labels", nargs="+", help="labels JSONL file(s) of one reader")
    parser.add_argument("--out", required=True, help="artifact JSON to write (e.g. pipelines/adaptive_rag.gate.json)")
    parser.add_argument("--kind", default="logistic", choices=("threshold", "logistic", "knn"))
    parser.add_argument("--cost", type=float, default=0.1,
                        help="lambda: the answer match one retrieval costs, in the objective (default 0.1)")
    parser.add_argument("--held-out", action="append", default=["bench/data/heldout_nq_ids.txt"], metavar="FILE",
                        help="question-id file the training must not touch (repeatable; default: "
                        "bench/data/heldout_nq_ids.txt)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="the gate's model (kind threshold)")
    parser.add_argument("--backend", default=None, help="backend file whose model the threshold gate asks (kind "
                        "threshold; a served one gives P(yes) from top log-probabilities)")
    parser.add_argument("--today", default=None, help="ISO date of the gate prompt (kind threshold; unused by its "
                        "vanilla prompt, recorded)")
    parser.add_argument("--embedding-model", default="all-minilm-l6-v2", help="question embedder (learned kinds)")
    parser.add_argument(
        "--signals",
        default="date_words",
        help="comma-separated cheap signals of the logistic gate: date_words, top_score, top_dense_score ('' for none)",
    )
    parser.add_argument("--index", default=None, help="index config of the top_score signal "
                        "(e.g. indexing/kilt-sample.yaml)")
    parser.add_argument("--knn-k", type=int, default=10, help="neighbours of the knn gate (default 10)")
    parser.add_argument("--c", type=float, default=1.0, help="inverse L2 strength of the logistic gate (default 1)")
    parser.add_argument("--folds", type=int, default=5, help="cross-validation folds for the logistic cut")
    parser.add_argument("--both-wrong", default="no_need", choices=("no_need", "exclude"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None)
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from icr2_components.commands._console import make_console
    from icr2_components.evaluation.gates.gate_tradeoff import format_curve_table
    from icr2_components.evaluation.gates.gate_training import train_gate
    from icr2_components.evaluation.statistics.intervals import format_interval
    from icr2_components.preflight import (
        check_device,
        check_input,
        check_input_if_present,
        check_output_file,
        check_text_file,
    )

    for label_file in args.labels:
        check_input(label_file, "labels", folder=False)
    for ids_file in args.held_out:
        check_text_file(ids_file, "--held-out")
    check_input_if_present(args.backend, "--backend")
    check_input_if_present(args.index, "--index")
    check_output_file(args.out, "--out")
    check_device(args.device, "--device")
    console = make_console()
    signals = [s.strip() for s in args.signals.split(",") if s.strip()]
    held_out = list(dict.fromkeys(args.held_out))
    summary = train_gate(args.labels, args.kind, args.out, args.cost, held_out, args.model, args.embedding_model,
                         signals, args.index, args.knn_k, args.c, args.folds, args.both_wrong, args.today,
                         args.device, args.seed, progress=not args.no_progress, backend=args.backend)
    console.print(format_curve_table(args.kind, summary["curve"], title=f"{args.kind}: trade-off on the training "
                                     f"questions ({summary['training'].get('cut_chosen_on', 'P(yes)')})"))
    objective = summary["objective"]
    console.print(f"cut {summary['cut']:.4f}: retrieval rate {objective['retrieval_rate']:.3f}, answer match "
                  f"{objective['answer_match']:.3f}, objective {objective['objective']:.3f} "
                  f"(λ = {objective['cost']:g}, {objective['questions']} questions); AUROC of the scores the cut was "
                  f"chosen on {format_interval(summary['training']['auroc_of_cut_scores'])}")
    console.print(json.dumps({k: v for k, v in summary["training"].items() if k != "auroc_of_cut_scores"}, default=str))
    console.print(f"wrote {summary['artifact']}")
    return 0
