"""``icr2 serve NAME|FILE.yaml [--host 127.0.0.1] [--port 1416]``: one pipeline over HTTP (a shipped pipeline's
name, e.g. ``closed_book``, or a YAML path), at
``POST /<name>/run`` and as an OpenAI-compatible chat model (``/v1/models``, ``/v1/chat/completions``)."""

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
    from icr2_components.serving.request_model import DEFAULT_MAX_QUERY_CHARS

    parser = subparsers.add_parser(
        "serve", help="serve a pipeline YAML (declared inputs/outputs) at POST /<name>/run and as an OpenAI-compatible "
        "chat model at /v1",
        description="Loads the pipeline with the icr2_components allowlist (never unsafe), validates requests "
        "from its declared inputs and answers errors as JSON with a reason. Binds to loopback by default.")
    parser.add_argument("pipeline", help="a shipped pipeline's name (e.g. closed_book, vanilla_rag, adaptive_rag) or "
                        "a pipeline YAML's path")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"bind address (default {DEFAULT_HOST}, loopback)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow a non-loopback --host (the server has no authentication)")
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
    parser.set_defaults(handler=run)


def run(args) -> int:
    from icr2_components.stores.index_switch import index_switch_set

    with index_switch_set(getattr(args, "index", None)):  # ICR2_INDEX_CONFIG for the server's pipeline
        return _run(args)


def _run(args) -> int:
    from icr2_components.backends.pipelines import resolve_backend
    from icr2_components.serving.app import LOOPBACK_HOSTS, bind_server_socket, create_serving_app, run_server

    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be 1-65535, got {args.port}.")
    if args.host not in LOOPBACK_HOSTS and not args.allow_remote:
        raise ValueError(f"--host {args.host} is not loopback and the server has no authentication; "
                         "add --allow-remote to bind it anyway.")
    # bound before the pipeline loads: a port in use is one line at once, never after the banner
    sock = bind_server_socket(args.host, args.port)
    try:
        app = create_serving_app(args.pipeline, max_body_bytes=args.max_body_bytes,
                                 max_query_chars=args.max_query_chars, max_new_tokens=args.max_new_tokens,
                                 concurrency=args.concurrency, backend=resolve_backend(args.backend),
                                 max_queue=args.max_queue, body_timeout=args.body_timeout,
                                 request_timeout=args.request_timeout)
        base = f"http://{args.host}:{args.port}"
        print(f"icr2 serve: POST {base}{app.state.icr2_run_path}  inputs {sorted(app.state.icr2_spec.inputs)}; "
              f"OpenAI-compatible at {base}/v1 as model {app.state.icr2_spec.name!r}  (Ctrl-C stops)", flush=True)
        run_server(app, host=args.host, port=args.port, allow_remote=args.allow_remote, sock=sock)
    finally:
        sock.close()
    return 0
