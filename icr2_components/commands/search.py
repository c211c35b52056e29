"""``icr2 search --config indexing/<name>.yaml --query "..."``: a quick query against an index."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    from icr2_components.stores.retrieval_methods import retrieval_method_names

    parser = subparsers.add_parser("search", help="query an index (BM25, dense or hybrid)")
    parser.add_argument("--config", default="kilt-sample", help="index config: a shipped name or a YAML path")
    parser.add_argument("--query", "-q", required=True)
    parser.add_argument("--method", choices=retrieval_method_names(), default="hybrid")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from rich.table import Table

    from icr2_components.commands._console import make_console
    from icr2_components.preflight import check_input_if_present
    from icr2_components.stores import open_index

    check_input_if_present(args.config, "--config")
    documents = open_index(args.config).retrieve(args.query, method=args.method, top_k=args.top_k)
    if args.json:
        print(
            json.dumps(
                [{"id": d.id, "score": d.score, "title": d.meta.get("title"), "content": d.content} for d in documents],
                indent=2,
            )
        )
        return 0
    table = Table(title=f"{args.method}: {args.query}")
    for column in ("rank", "id", "score", "title", "passage"):
        table.add_column(column)
    for rank, d in enumerate(documents, start=1):
        table.add_row(str(rank), d.id, f"{d.score:.3f}", str(d.meta.get("title", "")), (d.content or "")[:120])
    make_console().print(table)
    return 0
