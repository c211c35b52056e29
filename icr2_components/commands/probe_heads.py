"""``icr2 probe-heads --benchmark val.jsonl --model smollm2-135m-instruct``: find a reader's retrieval heads."""

from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser("probe-heads", help="probe a reader's attention heads for retrieval (ICR2 RAP)")
    parser.add_argument(
        "--benchmark", required=True, help="validation CiC instances (ICR2 JSONL from `icr2 build-benchmark`)"
    )
    parser.add_argument("--model", default="smollm2-135m-instruct", help="the reader: alias, path or HF id")
    parser.add_argument("--output", default="bench/results/rap_heads.json", help="artifact JSON to write")
    parser.add_argument("--heatmap", default=None, help="heatmap PNG (default: the artifact path with .png)")
    parser.add_argument("--limit", type=int, default=100, help="random validation instances to probe (ICR2: 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--m", type=int, default=1, help="M: passages per head stored as the default")
    parser.add_argument("--q", type=int, default=4, help="Q: heads selected")
    parser.add_argument("--max-m", type=int, default=8, help="hit rates are computed for M = 1..max-m")
    parser.add_argument(
        "--query-position", choices=["last_prompt_token", "generated_tokens"], default="last_prompt_token"
    )
    parser.add_argument(
        "--generation-tokens", type=int, default=6, help="greedy tokens generated in the generated_tokens mode"
    )
    parser.add_argument("--aggregate", choices=["sum", "mean", "max"], default="sum")
    parser.add_argument("--query-aware", action="store_true", help="the prompt repeats the query before the corpus")
    parser.add_argument("--max-context-tokens", type=int, default=None)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default=None)
    parser.set_defaults(handler=run)


def run(args) -> int:
    from icr2_components.filters.probing.cic_instances import read_benchmark_instances
    from icr2_components.filters.probing.probing_job import choose_instances, probe_to_artifact
    from icr2_components.preflight import check_device, check_input, check_output_file
    from icr2_components.records import SkipReport

    check_input(args.benchmark, "--benchmark", folder=False, how_to_make="write one with `icr2 build-benchmark`")
    check_output_file(args.output, "--output")
    check_output_file(args.heatmap, "--heatmap")
    check_device(args.device, "--device")
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be >= 1.")
    skips = SkipReport(source=args.benchmark)
    instances = choose_instances(list(read_benchmark_instances(args.benchmark, skips)), args.limit, args.seed)
    heatmap = args.heatmap or str(Path(args.output).with_suffix(".png"))
    outcome = probe_to_artifact(
        instances,
        args.model,
        m=args.m,
        q=args.q,
        max_m=args.max_m,
        query_position_mode=args.query_position,
        aggregate=args.aggregate,
        query_aware=args.query_aware,
        dtype=args.dtype,
        device=args.device,
        max_context_tokens=args.max_context_tokens,
        generation_tokens=args.generation_tokens,
        artifact_path=args.output,
        heatmap_path=heatmap,
    )
    artifact = outcome.artifact
    print(skips.summary())
    print(outcome.result.skips.summary())
    print(
        f"probed {artifact.instances} instances; chance hit rate at M={artifact.m}: "
        f"{artifact.chance_hit_rates[artifact.m - 1]:.3f}"
    )
    for layer, head in artifact.heads:
        print(f"  layer {layer:2d} head {head:2d}: hit rate {artifact.head_hit_rate(layer, head):.3f}")
    print(f"wrote {outcome.artifact_path} and {outcome.heatmap_path}")
    return 0
