"""A real HTTP proxy on a free loopback port that forwards every request to a real OpenAI-compatible server.

Tests and benches put it between a client and the real llama.cpp server to see or shape the traffic without
faking the server: fail some requests, hold them, count those in flight, record their bodies. A subclass
overrides one method, :meth:`ForwardingProxy.exchange`, which gets each request and a ``forward`` callable; it
may act before and after forwarding, or answer without forwarding::

    class Counting(ForwardingProxy):
        chats = 0

        def exchange(self, method, path, body, forward):
            if self.is_chat(method, path):
                with self.lock:
                    self.chats += 1
            return forward()

    with Counting("http://127.0.0.1:8089") as proxy:   # the server's root, without /v1
        ...  # point the client at proxy.url (".../v1")

The answer is read whole before it is passed on (no streaming through the proxy); a streamed answer keeps the
server's ``text/event-stream`` content type, so the client that asked for a stream still parses one.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class ProxyReply:
    """What the proxy answers: the server's reply, or one a subclass makes up (e.g. a 503)."""

    status: int
    body: bytes
    content_type: str = "application/json"


class ForwardingProxy:
    """Forwards GET and POST to ``target_root`` (the server's root URL, without ``/v1``) and answers the client
    with the server's status, content type and body; ``url`` is the proxy's OpenAI API root (``.../v1``).

    ``timeout_s`` bounds each forwarded request. ``lock`` is for subclasses' counters: requests are handled on
    one thread each. Close it with :meth:`close` or use it as a context manager."""

    def __init__(self, target_root: str, *, timeout_s: float = 600) -> None:
        self.target_root, self.timeout_s = target_root.rstrip("/"), timeout_s
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _handle(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                reply = proxy.exchange(method, self.path, body, lambda: proxy._forward(method, self.path, body))
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def log_message(self, *args):
                pass  # a test's output is not the place for an access log

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def exchange(self, method: str, path: str, body: bytes, forward: Callable[[], ProxyReply]) -> ProxyReply:
        """One request: by default forwarded as it came. Override to act before or after ``forward()`` (which
        sends the request to the server and returns its reply), or to answer without calling it."""
        return forward()

    @staticmethod
    def is_chat(method: str, path: str) -> bool:
        """Whether the request is a chat completion (what a reader sends; the others are tokenize, models, ...)."""
        return method == "POST" and path.endswith("/chat/completions")

    def _forward(self, method: str, path: str, body: bytes) -> ProxyReply:
        response = httpx.request(method, self.target_root + path, content=body or None,
                                 headers={"Content-Type": "application/json"}, timeout=self.timeout_s)
        return ProxyReply(response.status_code, response.content,
                          response.headers.get("content-type", "application/json"))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> ForwardingProxy:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
