"""``icr2 embed CONFIG --out DIR``: embed a config's corpus into resumable vector shards keyed by passage id.

The embedding settings are the config's ``embedding:`` section (``backend: fp32|onnx|onnx-int8|openvino``,
``devices``, ``processes``, ``threads``, ``batch_size``). Run it again after a kill: finished shards are read past,
not recomputed, and a shard is closed at least every ``--shard-seconds`` (10), so a kill loses at most that much
work. Then index with ``--set embedding.vectors_dir=DIR`` to write the vectors from the shards.
"""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "embed", help="embed a config's corpus into resumable vector shards (.npy + ids) keyed by passage id"
    )
    parser.add_argument(
        "config", help="index config YAML (indexing/*.yaml); its corpus and embedding sections are used"
    )
    parser.add_argument(
        "--out", required=True, help="folder for the shards (created; a folder from an earlier run is resumed)"
    )
    parser.add_argument(
        "--shard-size", type=int, default=10_000, help="passages per shard (default 10000; fixed for a folder)"
    )
    parser.add_argument(
        "--shard-seconds", type=float, default=10.0,
        help="also close a shard this many seconds after it was begun (default 10): a kill loses at most that much",
    )
    parser.add_argument(
        "--max-shards",
        type=int,
        default=None,
        help="stop after writing this many new shards (a partial run; run again to go on)",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set embedding.backend=onnx-int8 (repeatable)")
    parser.add_argument("--report", help="write the run's report as JSON here")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from rich.table import Table

    from icr2_components.commands._console import make_console
    from icr2_components.commands.index import parse_overrides
    from icr2_components.preflight import check_input, check_output_file, check_output_folder
    from icr2_components.stores import load_index_config
    from icr2_components.stores.embedding_shards import embed_to_shards

    check_input(args.config, "config", folder=False)
    check_output_folder(args.out, "--out")
    check_output_file(args.report, "--report")
    if args.shard_size < 1:
        raise ValueError(f"--shard-size must be >= 1, got {args.shard_size}.")
    if args.max_shards is not None and args.max_shards < 0:
        raise ValueError(f"--max-shards must be >= 0, got {args.max_shards}.")
    config = load_index_config(args.config, overrides=parse_overrides(args.set))
    report = embed_to_shards(
        config, args.out, shard_size=args.shard_size, max_shards=args.max_shards, progress=not args.no_progress,
        shard_seconds=args.shard_seconds,
    )
    table = Table(title=f"icr2 embed: {config.name} ({report.backend})")
    for column in (
        "folder",
        "embedded",
        "resumed (not recomputed)",
        "skipped by the reader",
        "shards written",
        "shards",
        "passages",
        "complete",
        "passages/s",
    ):
        table.add_column(column)
    table.add_row(
        report.out_dir,
        str(report.passages_embedded),
        str(report.resumed_passages),
        str(report.skips.get("total", 0)),
        str(report.shards_written),
        str(report.shards_total),
        str(report.passages_total),
        "yes" if report.complete else "no",
        f"{report.passages_per_second:.1f}",
    )
    console = make_console()
    console.print(table)
    if report.skips.get("total"):
        console.print(
            f"skipped: {json.dumps(report.skips['counts'])}; examples: {json.dumps(report.skips['examples'])}"
        )
    if not report.complete:
        console.print(f"not finished: run `icr2 embed {args.config} --out {args.out}` again to go on.")
    if args.report:
        with open(args.report, "w") as handle:
            json.dump(report.as_dict(), handle, indent=2)
    return 0
