"""The ``icr2`` command. Thin: it parses arguments and calls the package.

Each subcommand lives in its own module under ``icr2_components/commands/`` and exposes
``register(subparsers)``; the module's ``run(args)`` does the work. New commands are found automatically.

Errors at the edge: every error a user can cause is printed as ONE line on stderr,
``icr2 <command>: error: <message>``, and the exit status is 1 (argparse usage errors stay 2, Ctrl-C is 130 with
``icr2 <command>: interrupted``). The message names the input and what to do: the package's own errors
(:class:`~icr2_components.errors.Icr2Error`) and ``ValueError``/``OSError`` carry such a message; an unreachable
Elasticsearch names the URL and how to start a node; an error answered by Elasticsearch gives its status and
reason; a YAML syntax error gives the file, line and column; a component that failed inside a Haystack pipeline
(``PipelineRuntimeError``) is unwrapped to the component's name and its own error. Any other exception is
unexpected (a bug, or a case not handled yet): it also gets one line, with its class and the hint
"unexpected error; run with --debug for the traceback", and exit status 1.

Every input a run skips (a bad row, an unreadable file) is named in the run's skip file, one JSON line each
(``skips.jsonl`` in its output folder, beside its output file, or under the cache root); the console shows the
first few of each reason and, at the end, the count and the file's path.

``--debug`` (or ``ICR2_DEBUG=1`` in the environment) lets the exception propagate with its full traceback;
``-v/--verbose`` only turns on debug logging.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys

from icr2_components._environment import apply_environment_defaults

DEBUG_ENV = "ICR2_DEBUG"
# Loggers that narrate retries of a failure the CLI then reports in its one line (shown with -v).
_CHATTY_LOGGERS = ("elastic_transport", "elasticsearch", "bm25s")


def build_parser() -> argparse.ArgumentParser:
    import icr2_components.commands as commands
    from icr2_components.extras import MissingExtraError, missing_extra_message

    parser = argparse.ArgumentParser(
        prog="icr2", description="Long-context RAG components: index, build, probe, compare.",
        epilog=f"An error is reported as one line and exit status 1; --debug (or {DEBUG_ENV}=1) shows its traceback.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--debug", action="store_true",
                        help=f"on an error, show the full traceback instead of one line (or set {DEBUG_ENV}=1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"icr2_components.commands.{info.name}")
            module.register(subparsers)
        except MissingExtraError as error:  # a package of an extra refused at import (serving): its own line
            _register_unavailable(subparsers, info.name.replace("_", "-"), str(error))
        except ModuleNotFoundError as error:  # a command of an extra that is not installed: it says which
            if missing_extra_message(error) is None:
                raise
            _register_unavailable(subparsers, info.name.replace("_", "-"), missing_extra_message(error))
    return parser


def _register_unavailable(subparsers, name: str, message: str) -> None:
    def refuse(args: argparse.Namespace) -> int:
        from icr2_components.extras import MissingExtraError

        raise MissingExtraError(message)

    parser = subparsers.add_parser(name, help=f"(not installed: {message})", add_help=False)
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    parser.set_defaults(handler=refuse)


def debug_requested(args: argparse.Namespace | None = None) -> bool:
    """``--debug`` or ``ICR2_DEBUG`` set to 1/true/yes/on."""
    if args is not None and getattr(args, "debug", False):
        return True
    return os.environ.get(DEBUG_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def one_line(text: object) -> str:
    """The text with its line breaks and runs of spaces folded into single spaces."""
    return " ".join(str(text).split())


def _config_file(args: argparse.Namespace | None) -> str | None:
    for name in ("config", "index"):
        value = getattr(args, name, None) if args is not None else None
        if isinstance(value, str) and value.endswith((".yaml", ".yml")):
            return value
    return None



# ------------------------------------------------------------------------------------------------ mapping


def _is_yaml_error(error: BaseException) -> bool:
    try:
        import yaml
    except ImportError:  # pragma: no cover
        return False
    return isinstance(error, yaml.YAMLError)


def _haystack_errors() -> tuple[type[BaseException], ...]:
    try:
        from haystack.core.errors import DeserializationError, PipelineError, SerializationError
    except ImportError:  # pragma: no cover
        return ()
    return (DeserializationError, PipelineError, SerializationError)


def _unwrap_pipeline_runtime_error(error: BaseException) -> tuple[BaseException, str | None]:
    """Haystack wraps a component's exception in ``PipelineRuntimeError``: return the component's own one."""
    try:
        from haystack.core.errors import PipelineRuntimeError
    except ImportError:  # pragma: no cover
        return error, None
    component = None
    while isinstance(error, PipelineRuntimeError) and error.__cause__ is not None:
        component = component or getattr(error, "component_name", None)
        error = error.__cause__
    return error, component


def describe_error(error: BaseException, args: argparse.Namespace | None = None) -> tuple[str, bool]:
    """``(one-line message, expected)`` for an exception that reached the CLI; ``expected`` is False for a bug."""
    from icr2_components.errors import Icr2Error

    error, component = _unwrap_pipeline_runtime_error(error)
    prefix = f"component '{component}': " if component else ""
    from icr2_components.stores.elasticsearch.errors import describe_elasticsearch_error

    message = describe_elasticsearch_error(error, _config_file(args))
    if message is not None:
        return prefix + message, True
    if _is_yaml_error(error):
        from icr2_components.pipeline_loading import describe_yaml_error

        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        source = getattr(mark, "name", "") or ""
        source = source if source and not source.startswith("<") else (_config_file(args) or "the YAML input")
        return prefix + f"{source} is not valid YAML: {describe_yaml_error(error)}. Fix the syntax there.", True
    if isinstance(error, OSError) and "huggingface.co" in str(error):
        from icr2_components.models.resolver import BUNDLED_MODELS

        return prefix + (
            "a model could not be loaded: it is not in the local Hugging Face cache and the hub is offline here "
            f"(HF_HUB_OFFLINE=1). Use a bundled alias ({', '.join(sorted(BUNDLED_MODELS))}) or a local model "
            "folder, or download it where the hub is reachable (HF_HUB_OFFLINE=0)."), True
    from icr2_components.extras import missing_extra_message

    missing = missing_extra_message(error)
    if missing:  # an optional dependency a command needs: the extra to install
        return prefix + missing, True
    if isinstance(error, (Icr2Error, ValueError, OSError, *_haystack_errors())):
        text = str(error)
        cause = error.__cause__
        if cause is not None and _is_yaml_error(cause) and str(cause) and str(cause) in text:
            # "<file> is not valid YAML: <PyYAML's multi-line text with a caret>" -> the line, column and problem
            from icr2_components.pipeline_loading import describe_yaml_error

            text = text.replace(str(cause), describe_yaml_error(cause))
        return prefix + one_line(text), True
    return prefix + f"{type(error).__name__}: {one_line(error)}", False


def _run_recording_skips(args: argparse.Namespace) -> int:
    """Run the command with its run's skip file open (every input skipped, named; the path on stderr at the end)."""
    from icr2_components.preflight import run_skip_file_path
    from icr2_components.records.skips import skip_file

    with skip_file(run_skip_file_path(args.command, args)) as skipped:
        code = int(args.handler(args) or 0)
    if skipped.written:
        print(f"icr2 {args.command}: {skipped.summary()}", file=sys.stderr)
    elif skipped.path.is_file() and skipped.path.stat().st_size:
        skipped.path.write_text("")  # an earlier run's skips: this run skipped nothing
    return code


def main(argv: list[str] | None = None) -> int:
    apply_environment_defaults()
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if args.verbose else logging.ERROR)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    debug = debug_requested(args)
    try:
        return _run_recording_skips(args)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"icr2 {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # the edge: one line each, the traceback with --debug
        if debug:
            raise
        message, expected = describe_error(error, args)
        if not expected:
            message += " (unexpected error; run with --debug for the traceback)"
        print(f"icr2 {args.command}: error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
