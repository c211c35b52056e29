"""``icr2 index --config indexing/<name>.yaml``: stream a KILT knowledge source into a store."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser("index", help="index a KILT knowledge source into the configured store")
    parser.add_argument("--config", required=True, help="index config YAML (indexing/*.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set store.index=my-index (repeatable)")
    parser.add_argument("--report", help="write the indexing report as JSON here")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(handler=run)


def parse_overrides(pairs: list[str]) -> dict:
    import yaml

    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or "." not in key:
            raise ValueError(f"--set takes SECTION.KEY=VALUE, got {pair!r}.")
        overrides[key] = yaml.safe_load(value)
    return overrides


def run(args) -> int:
    from icr2_components.commands._console import make_console
    from rich.table import Table

    from icr2_components.stores import IndexHandle, load_index_config

    config = load_index_config(args.config, overrides=parse_overrides(args.set))
    report = IndexHandle(config).build(progress=not args.no_progress)
    table = Table(title=f"icr2 index: {config.name}")
    for column in ("store", "index", "passages streamed", "in store", "resumed from", "skipped", "rejected", "seconds"):
        table.add_column(column)
    table.add_row(report.store, report.index, str(report.passages_streamed), str(report.documents_in_store),
                  str(report.resumed_from), str(report.skips.get("total", 0)), str(report.rejected), f"{report.seconds:.1f}")
    make_console().print(table)
    if report.skips.get("total"):
        make_console().print(f"skipped: {json.dumps(report.skips['counts'])}; examples: {json.dumps(report.skips['examples'])}")
    if args.report:
        with open(args.report, "w") as handle:
            json.dump(report.as_dict(), handle, indent=2)
    return 0
