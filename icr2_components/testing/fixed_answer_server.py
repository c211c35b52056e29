"""A real HTTP server on a free loopback port that answers every GET and POST with one status and body.

Tests and benches point a client at it to see what the client makes of a server that is not an LLM server (an
nginx welcome page, a 503 on every request)::

    with FixedAnswerServer(200, b"<html><body>Welcome to nginx!</body></html>") as server:
        ...  # point the client at server.url (".../v1")
"""

from __future__ import annotations

import http.server
import threading


class FixedAnswerServer:
    """Answers every request with ``status``, ``body`` and ``content_type`` (the request's body is read first);
    ``url`` is its OpenAI API root (``.../v1``). Serves from construction until :meth:`close` (or the end of a
    ``with`` block)."""

    def __init__(self, status: int, body: bytes, content_type: str = "text/html") -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass  # a test's output is not the place for an access log

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FixedAnswerServer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
