"""``icr2 seal-cache FILE``: seal an answer cache written before answer records carried their ``record_sha``."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "seal-cache",
        help="seal an answer cache (answers.jsonl) written before records carried record_sha",
        description="Adds each record's record_sha (a hash of its content) so that an answer edited later is refused; "
        "of a key written twice the later line is kept (what unsealed caches were read as), named as replacing the "
        "earlier; lines that are not records are dropped and listed. The old file is kept as FILE.unsealed. Check "
        "the file's answers first: sealing vouches for them.",
    )
    parser.add_argument("cache", metavar="FILE", help="the cache file, e.g. runs/compare/answers.jsonl")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from icr2_components.evaluation.compare.cache import seal_cache
    from icr2_components.preflight import check_input

    check_input(args.cache, "cache", folder=False)
    print(json.dumps(seal_cache(args.cache), indent=1))
    return 0
