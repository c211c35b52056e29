"""``icr2 index --config indexing/<name>.yaml``: stream a corpus (``corpus.format``: kilt, jsonl, csv, parquet,
hf_dataset, folder; :mod:`icr2_components.corpora`) into a store, or check an index used as it is (``existing``).

``icr2 index --plan indexing/<name>.yaml [--json]``: build nothing; project passages, disk, vector memory and
indexing time for the config from figures measured on this machine, and say where one node stops being enough
(:mod:`icr2_components.stores.elasticsearch.index_plan`)."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "index", help="index a corpus (corpus.format: kilt, jsonl, csv, parquet, hf_dataset, folder) into the "
        "configured store, or check an existing index")
    parser.add_argument("--config", help="index config YAML (indexing/*.yaml) to build")
    parser.add_argument("--plan", metavar="CONFIG",
                        help="build nothing: project passages, disk, vector memory and indexing time for this index "
                        "config from the figures measured on this machine, and where one node stops being enough")
    parser.add_argument("--figures", default="measured-figures",
                        help="measured figures for --plan (bench/index_plan_figures.py writes them)")
    parser.add_argument("--passages", type=int, help="--plan for this many passages instead of the corpus's")
    parser.add_argument("--json", action="store_true", help="--plan: print the plan as JSON")
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
    from rich.table import Table

    from icr2_components.commands._console import make_console
    from icr2_components.preflight import check_input_if_present, check_output_file
    from icr2_components.stores import IndexHandle, load_index_config

    check_input_if_present(args.config, "--config")
    check_input_if_present(args.plan, "--plan")
    check_output_file(args.report, "--report")
    if args.plan and args.config:
        raise ValueError("--plan CONFIG builds nothing and --config CONFIG builds: give one of them.")
    if args.plan:
        return run_plan(args)
    if not args.config:
        raise ValueError("icr2 index needs --config CONFIG (build the index) or --plan CONFIG (project its cost).")
    config = load_index_config(args.config, overrides=parse_overrides(args.set))
    report = IndexHandle(config).build(progress=not args.no_progress)
    table = Table(title=f"icr2 index: {config.name}")
    for column in ("store", "index", "passages streamed", "in store", "resumed from", "skipped", "rejected", "seconds"):
        table.add_column(column)
    table.add_row(
        report.store,
        report.index,
        str(report.passages_streamed),
        str(report.documents_in_store),
        str(report.resumed_from),
        str(report.skips.get("total", 0)),
        str(report.rejected),
        f"{report.seconds:.1f}",
    )
    make_console().print(table)
    if report.details.get("used_as_is"):
        make_console().print(
            f"used as it is (corpus.format: existing): nothing written; {report.details['sampled']} documents sampled "
            f"have text ({report.details['sampled_with_title']} a title)"
            + (f" and {report.details['embedding_dimension']}-d embeddings" if report.details["embedding_dimension"]
               else "")
        )
    if report.skips.get("total"):
        make_console().print(
            f"skipped in {report.skips.get('source')}: {json.dumps(report.skips['counts'])}; "
            f"examples: {json.dumps(report.skips['examples'])}"
        )
    if args.report:
        with open(args.report, "w") as handle:
            json.dump(report.as_dict(), handle, indent=2)
    return 0


def run_plan(args) -> int:
    from rich.table import Table

    from icr2_components.commands._console import make_console
    from icr2_components.stores import load_index_config
    from icr2_components.stores.elasticsearch.index_plan import (
        format_bytes,
        format_seconds,
        load_measured_figures,
        plan_index,
        plan_json,
    )

    config = load_index_config(args.plan, overrides=parse_overrides(args.set))
    figures = load_measured_figures(args.figures)
    plan = plan_index(config, figures, passages=args.passages)
    if args.json:
        print(plan_json(plan))
        return 0
    node = plan["node"]
    measured = figures.machine
    table = Table(title=f"icr2 index --plan: {config.name} ({plan['layout']})")
    table.add_column("")
    table.add_column("projected", justify="right")
    table.add_column("from")
    table.add_row("passages", f"{plan['passages']:,}", plan["passages_source"])
    text_share = (
        ""
        if plan["index_type"] == "bm25_only"
        else (
            f"; {figures.disk_per_passage('bm25_only'):,.0f} of them text and BM25, the rest the vector in _source and "
            "its index"
        )
    )
    table.add_row(
        "disk (primaries)",
        format_bytes(plan["disk_bytes_primary"]),
        f"{figures.disk_per_passage(plan['index_type']):,.0f} B/passage measured ({plan['index_type']}{text_share})"
        + (f"; {plan['disk_note']}" if plan.get("disk_note") else ""),
    )
    if plan["disk_bytes_with_replicas"] != plan["disk_bytes_primary"]:
        table.add_row("disk (with replicas)", format_bytes(plan["disk_bytes_with_replicas"]), "x (1 + replicas)")
    if plan["index_type"] == "bm25_only":
        table.add_row("vector memory", "-", "BM25 only: no vector field")
    else:
        graph = f" + 4*m (m {plan['hnsw_m']})" if plan["hnsw_m"] else ""
        per = "4*dims" if plan["index_type"] in ("hnsw", "flat") else "dims + 4"
        table.add_row(
            "vector memory",
            format_bytes(plan["vector_memory_bytes"]),
            f"{plan['vector_bytes_per_passage']} B/vector = {per}{graph}, dims {plan['dims']} (Elasticsearch's "
            "formula)",
        )
        table.add_row(
            "embedding time",
            format_seconds(plan["embedding_seconds"]),
            f"{figures.embedding['passages_per_s']:.1f} passages/s measured ({figures.embedding.get('device', 'cpu')})"
            + (f"; {plan['embedding_device_note']}" if plan["embedding_device_note"] else ""),
        )
    table.add_row("indexing time", format_seconds(plan["indexing_seconds"]),
                  f"{figures.rate(plan['index_type']):,.0f} passages/s measured ({plan['index_type']}, writer)")
    table.add_row(
        "total time",
        format_seconds(plan["total_seconds"]),
        "embedding then indexing, one stream (the writer embeds as it goes)",
    )
    table.add_row(
        "shard size",
        format_bytes(plan["shard_bytes"]),
        f"{plan['layout'].split(',')[0]}; at least {plan['suggested_min_shards']} shard(s) keep each under 50 GB",
    )
    table.add_row(
        "one node's budget",
        f"{format_bytes(plan['node_vector_budget_bytes'])} RAM, {format_bytes(plan['node_disk_budget_bytes'])} disk",
        f"RAM beside the heap, disk to the 85% watermark: {node['source']}",
    )
    console = make_console()
    console.print(table)
    if plan["one_node_enough"]:
        console.print("[green]One node is enough[/green] for this index on the node above.")
    else:
        console.print(f"[bold]One node is not enough[/bold] (at least {plan['nodes_needed']} nodes like it):")
        for limit in plan["one_node_limits"]:
            console.print(f"  - {limit}")
    if plan["shards_too_big"]:
        console.print(
            f"  - shards of {format_bytes(plan['shard_bytes'])}: set store.shards >= {plan['suggested_min_shards']}"
        )
    console.print(f"figures: {figures.source}, measured {figures.measured_at} on {measured.get('hostname')} "
                  f"({measured.get('cpu_count')} cores, {measured.get('cpu_model')}, load "
                  f"{(measured.get('load_average_before') or ['?'])[0]}) at {figures.passages_measured} passages")
    for note in figures.notes:
        console.print(f"  note: {note}")
    return 0
