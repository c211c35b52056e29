"""``icr2 serve NAME|FILE.yaml|FOLDER ... [--host 127.0.0.1] [--port 1416]``: pipelines over HTTP (shipped
pipelines' names, e.g. ``vanilla_rag rap``, YAML paths or a folder of them), each at ``POST /<name>/run`` and as a
model of an OpenAI-compatible API (``/v1/models``, ``/v1/chat/completions``); API keys, TLS, health routes and a
graceful SIGTERM (``serving.auth``, ``serving.security``, ``serving.lifecycle``)."""

from __future__ import annotations


def register(subparsers) -> None:
    from icr2_components.serving.app import (
        DEFAULT_BODY_TIMEOUT,
        DEFAULT_HOST,
        DEFAULT_MAX_BODY_BYTES,
        DEFAULT_MAX_QUEUE,
        DEFAULT_PORT,
        DEFAULT_REQUEST_TIMEOUT,
    )
    from icr2_components.serving.lifecycle import DEFAULT_GRACE_SECONDS
    from icr2_components.serving.request_model import DEFAULT_MAX_QUERY_CHARS

    parser = subparsers.add_parser(
        "serve", help="serve a pipeline YAML (declared inputs/outputs) at POST /<name>/run and as an OpenAI-compatible "
        "chat model at /v1",
        description="Loads the pipeline with the icr2_components allowlist (never unsafe), validates requests "
        "from its declared inputs and answers errors as JSON with a reason. Binds to loopback by default.")
    parser.add_argument("pipeline", nargs="+", help="one or more pipelines: shipped names (e.g. vanilla_rag rap "
                        "adaptive_rag), pipeline YAML paths or a folder of them; each is served at POST /<name>/run "
                        "and as the model <name>, and what they share (models, indexes) is loaded once")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"bind address (default {DEFAULT_HOST}, loopback); "
                        "another address needs API keys or --no-auth")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    keys = parser.add_argument_group("authentication and TLS")
    keys.add_argument("--api-keys-file", metavar="FILE",
                      help="file of accepted API keys' SHA-256 hashes, one a line: HASH [NAME] [N/min] (a per-key "
                      "rate limit); read again when it changes, so deleting a line revokes that key at once. "
                      "Clients send Authorization: Bearer KEY (the openai client's api_key)")
    keys.add_argument("--api-keys-env", metavar="NAME",
                      help="name of an environment variable holding accepted API keys, comma-separated (never give "
                      "a key on the command line)")
    keys.add_argument("--no-auth", action="store_true",
                      help="serve a non-loopback --host without API keys: open to everyone who can reach it (behind "
                      "a proxy that authenticates)")
    keys.add_argument("--allow-remote", action="store_true", help="older name of --no-auth")
    keys.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate (with --tls-key)")
    keys.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    keys.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                      help="a browser origin allowed to call the server (e.g. https://app.example.org; repeat for "
                      "more); a request from any other Origin gets 403")
    parser.add_argument("--grace-seconds", type=float, default=DEFAULT_GRACE_SECONDS,
                        help="on SIGTERM, seconds the requests in flight (streams included) have to finish before "
                        f"the server exits (default {DEFAULT_GRACE_SECONDS:g}); /health/ready answers 503 meanwhile")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                        help=f"larger request bodies get 413 (default {DEFAULT_MAX_BODY_BYTES})")
    parser.add_argument("--max-query-chars", type=int, default=DEFAULT_MAX_QUERY_CHARS,
                        help=f"longest accepted query (default {DEFAULT_MAX_QUERY_CHARS})")
    parser.add_argument("--max-new-tokens", type=int,
                        help="override every reader's answer budget (an OpenAI request's max_tokens may only lower it)")
    parser.add_argument("--backend", help="backend the pipeline's model follows: a shipped name (e.g. "
                        "llama_cpp_server) or a backend file (default: ICR2_BACKEND, else the pipeline's own model)")
    parser.add_argument("--index", metavar="CONFIG",
                        help="index config the pipeline's IndexRetrievers read instead of the one the YAML names, e.g. "
                        "kilt-sample-elasticsearch (a shipped name or a file; default: ICR2_INDEX_CONFIG, else the "
                        "YAML's own)")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="pipeline runs at once; other requests wait (default: a served --backend's "
                        "max_concurrency, else its kind's default; 1 for in-process models)")
    parser.add_argument("--max-queue", type=int, default=DEFAULT_MAX_QUEUE,
                        help="requests waiting for a run beyond those running; more are answered 429 with Retry-After "
                        f"(default {DEFAULT_MAX_QUEUE})")
    parser.add_argument("--body-timeout", type=float, default=DEFAULT_BODY_TIMEOUT,
                        help="seconds a client has to send the whole body it declared, however paced; then 408 and "
                        f"the connection is closed (default {DEFAULT_BODY_TIMEOUT:g})")
    parser.add_argument("--request-timeout", type=float, default=DEFAULT_REQUEST_TIMEOUT,
                        help="seconds the server has to answer a request, from its headers (waiting for a run "
                        f"included); then 504 and the connection is closed (default {DEFAULT_REQUEST_TIMEOUT:g})")
    watch = parser.add_argument_group("metrics, traces, logs and online A/B (docs/serving.md)")
    watch.add_argument("--no-metrics", action="store_true",
                       help="do not serve Prometheus metrics at GET /metrics (served by default; it needs the API "
                       "key like every route when the server has keys)")
    watch.add_argument("--trace", action="store_true",
                       help="trace every request with OpenTelemetry (a span per component), exported where the "
                       "OTEL_* variables say (OTLP to OTEL_EXPORTER_OTLP_ENDPOINT, default http://localhost:4318); "
                       "on without this flag when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER is set")
    watch.add_argument("--log-requests", metavar="PATH",
                       help="write one JSON line per request (request id, pipeline, status, latency, tokens) to PATH, "
                       "or - for standard error")
    watch.add_argument("--log-content", action="store_true",
                       help="also write each request's query and answer into --log-requests (off: they may be "
                       "personal data)")
    watch.add_argument("--ab", metavar="ARM=WEIGHT,...",
                       help="an online A/B split of served pipelines under one model name, e.g. "
                       "'vanilla_rag=0.9,rap=0.1' (sticky per user: OpenAI's user field or X-ICR2-User); needs "
                       "--ab-model and --ab-log")
    watch.add_argument("--ab-model", metavar="NAME", help="the model name of the A/B split (e.g. rag)")
    watch.add_argument("--ab-log", metavar="PATH",
                       help="append-only JSONL log of each A/B request's arm, answer, passages, latency and tokens "
                       "(read by icr2 compare --ab-log)")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from icr2_components.stores.index_switch import index_switch_set

    with index_switch_set(getattr(args, "index", None)):  # ICR2_INDEX_CONFIG for the server's pipeline
        return _run(args)


def _run(args) -> int:
    from icr2_components.backends.pipelines import resolve_backend
    from icr2_components.errors import UserInputError
    from icr2_components.serving.app import (
        LOOPBACK_HOSTS,
        bind_server_socket,
        check_tls_files,
        create_serving_app,
        run_server,
    )
    from icr2_components.serving.auth import KeyStore

    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be 1-65535, got {args.port}.")
    with_keys = args.api_keys_file is not None or args.api_keys_env is not None
    open_to_all = args.no_auth or args.allow_remote
    if with_keys and args.no_auth:
        raise UserInputError("--no-auth and API keys (--api-keys-file/--api-keys-env) contradict each other; give "
                             "one.")
    if args.host not in LOOPBACK_HOSTS and not (with_keys or open_to_all):
        raise UserInputError(f"--host {args.host} is not loopback and the server has no API keys; give "
                             "--api-keys-file FILE or --api-keys-env NAME, or --no-auth to serve it open to everyone "
                             "who can reach it.")
    if not 0 <= args.grace_seconds <= 86400:
        raise UserInputError(f"--grace-seconds must be from 0 to 86400, got {args.grace_seconds:g}.")
    check_tls_files(args.tls_cert, args.tls_key)
    keys = KeyStore(args.api_keys_file, args.api_keys_env) if with_keys else None  # refused now when unreadable
    observability = _observability(args)
    # bound before the pipelines load: a port in use is one line at once, never after the banner
    sock = bind_server_socket(args.host, args.port)
    try:
        app = create_serving_app(args.pipeline, max_body_bytes=args.max_body_bytes,
                                 max_query_chars=args.max_query_chars, max_new_tokens=args.max_new_tokens,
                                 concurrency=args.concurrency, backend=resolve_backend(args.backend),
                                 max_queue=args.max_queue, body_timeout=args.body_timeout,
                                 request_timeout=args.request_timeout, api_keys=keys,
                                 cors_origins=tuple(args.cors_origin), load_in_background=True,
                                 observability=observability)
        scheme = "https" if args.tls_cert else "http"
        base = f"{scheme}://{args.host}:{args.port}"
        served = app.state.icr2_pipelines
        routes = ", ".join(f"POST {base}{pipeline.run_path}" for pipeline in served.values())
        print(f"icr2 serve: {routes}  inputs {sorted(app.state.icr2_spec.inputs)}; OpenAI-compatible at {base}/v1 "
              f"as model{'s' if len(served) > 1 else ''} {', '.join(repr(name) for name in served)}; "
              f"{'API keys required' if keys else 'no API keys'}; ready at {base}/health/ready once loaded "
              "(Ctrl-C stops)", flush=True)
        run_server(app, host=args.host, port=args.port, allow_remote=open_to_all, sock=sock,
                   grace_seconds=args.grace_seconds, tls_certfile=args.tls_cert, tls_keyfile=args.tls_key)
    finally:
        sock.close()
    return 0


def _observability(args):
    """The metrics, tracing, request log and A/B split the flags ask for.

    :raises UserInputError: an A/B flag without the others, a malformed split or an unwritable log.
    """
    from icr2_components.errors import UserInputError
    from icr2_components.serving.ab_split import ABLog, ABSplit
    from icr2_components.serving.metrics import ServingMetrics
    from icr2_components.serving.observability import Observability
    from icr2_components.serving.pipelines import pipeline_sources
    from icr2_components.serving.request_log import RequestLog
    from icr2_components.serving.tracing import otel_exporter_configured, tracer_provider_from_env

    ab_flags = {"--ab": args.ab, "--ab-model": args.ab_model, "--ab-log": args.ab_log}
    if any(ab_flags.values()) and not all(ab_flags.values()):
        missing = [flag for flag, value in ab_flags.items() if not value]
        raise UserInputError(f"an online A/B split needs --ab, --ab-model and --ab-log; missing {', '.join(missing)}.")
    if args.log_content and not args.log_requests:
        raise UserInputError("--log-content needs --log-requests PATH (where the lines go).")
    ab = ab_log = None
    if args.ab:
        from pathlib import Path

        served = [Path(source).stem if source.endswith((".yaml", ".yml")) else source
                  for source in pipeline_sources(args.pipeline)]
        ab = ABSplit.parse(args.ab, args.ab_model, served)
        ab_log = ABLog(args.ab_log)
        if ab_log.torn_lines_cut:
            print(f"icr2 serve: --ab-log {args.ab_log}: cut {ab_log.torn_lines_cut} torn last line (a record a "
                  "kill interrupted; its client got no answer)", flush=True)
    tracing = args.trace or otel_exporter_configured()
    return Observability(metrics=None if args.no_metrics else ServingMetrics(),
                         tracer_provider=tracer_provider_from_env() if tracing else None,
                         request_log=RequestLog(args.log_requests, args.log_content) if args.log_requests else None,
                         ab=ab, ab_log=ab_log)
