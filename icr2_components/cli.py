"""The ``icr2`` command. Thin: it parses arguments and calls the package.

Each subcommand lives in its own module under ``icr2_components/commands/`` and exposes
``register(subparsers)``; the module's ``run(args)`` does the work. New commands are found automatically.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

from icr2_components._environment import apply_environment_defaults


def build_parser() -> argparse.ArgumentParser:
    import icr2_components.commands as commands

    parser = argparse.ArgumentParser(prog="icr2", description="Long-context RAG components: index, build, probe, compare.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"icr2_components.commands.{info.name}")
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    apply_environment_defaults()
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except (ValueError, FileNotFoundError, ConnectionError) as error:
        # User errors: one clear line, no traceback (use -v for the traceback).
        if args.verbose:
            raise
        print(f"icr2 {args.command}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
