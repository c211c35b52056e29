"""The outermost guard of ``icr2 serve``: header limits, the request id, CORS, and API keys with per-key limits.

``SecurityGuard`` is ASGI middleware that answers, before any other code sees the request (in this order):

* headers over ``MAX_HEADER_BYTES`` in all -> 431 ``request_header_fields_too_large``;
* more than one ``Authorization``, ``X-Request-ID`` or ``Origin`` header -> 400 ``bad_request`` (which one counts
  would be ambiguous);
* an ``X-Request-ID`` that is not 1-128 characters of ``[A-Za-z0-9._:/+=-]`` (a newline, a control character, a
  space: what a header injection or a log forgery needs) -> 400 ``invalid_request_id``; a valid one is returned in
  the ``x-request-id`` response header, and one is made (32 hex digits) when the request has none. The id is in
  ``scope["state"]["request_id"]`` for the code inside (logs, traces);
* a credential in the query string (``?api_key=``, ``?key=``, ``?token=``, ``?access_token=``...) -> 400
  ``credentials_in_query``, keys or not: a query string is logged by proxies, so such a key must be rotated, and
  the server never reads it (the message names the parameter, never its value);
* an ``Origin`` not in ``cors_origins`` -> 403 ``origin_not_allowed`` (a browser page of another site; clients that
  are not browsers send no Origin); a listed origin gets ``Access-Control-Allow-Origin`` on every answer, and its
  preflight (``OPTIONS`` with ``Access-Control-Request-Method``) a 204, before authentication (a preflight carries
  no credentials);
* with keys (``KeyStore``), on every path but ``PUBLIC_WITHOUT_KEY`` (liveness): no ``Authorization: Bearer KEY``
  header, another scheme, or a key that is not accepted (never accepted, or revoked) -> 401 ``invalid_api_key``
  with ``WWW-Authenticate: Bearer``; a key file that cannot be read since it changed -> 503
  ``api_keys_unavailable``; a key over its rate limit -> 429 ``rate_limited`` with ``Retry-After``. The key's name
  (never the key) is in ``scope["state"]["api_key_name"]``.

Every answer here is OpenAI's error shape ``{"error": {"message", "type", "param", "code"}}`` (the ``openai`` client
raises it as ``AuthenticationError``, ``RateLimitError``...), on every route.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from urllib.parse import parse_qsl

from icr2_components.serving.auth import KeyStore, KeysUnavailable, RateLimiter, retry_after_seconds
from icr2_components.serving.openai_models import openai_error

MAX_HEADER_BYTES = 16 * 1024
LIVENESS_PATH = "/health/live"
PUBLIC_WITHOUT_KEY = frozenset({LIVENESS_PATH})
REQUEST_ID_HEADER = b"x-request-id"
_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:/+=-]{1,128}")
_SINGLE_HEADERS = (b"authorization", REQUEST_ID_HEADER, b"origin")
CREDENTIAL_PARAMETERS = frozenset({"api_key", "api-key", "apikey", "key", "token", "access_token", "auth",
                                   "authorization", "bearer", "password", "secret"})

# status -> {error code: when}: what this guard answers, for /openapi.json and the docs
SECURITY_ERRORS: dict[int, dict[str, str]] = {
    400: {"bad_request": "more than one Authorization, X-Request-ID or Origin header",
          "invalid_request_id": "X-Request-ID is not 1-128 characters of [A-Za-z0-9._:/+=-]",
          "credentials_in_query": "a credential (api_key, key, token, access_token...) in the query string: send it "
                                  "as Authorization: Bearer KEY only, and rotate that key"},
    401: {"invalid_api_key": "the server has API keys and the request has no Authorization: Bearer header, another "
                             "scheme, or a key that is not accepted (unknown or revoked)"},
    403: {"origin_not_allowed": "an Origin header not listed by --cors-origin"},
    429: {"rate_limited": "the key's own rate limit (its line in --api-keys-file) is used up; retry after the "
                          "Retry-After header's seconds"},
    431: {"request_header_fields_too_large": f"the request's headers are over {MAX_HEADER_BYTES} bytes in all"},
    503: {"api_keys_unavailable": "the key file changed and cannot be read or parsed; every request is refused "
                                  "until it is fixed"},
}

logger = logging.getLogger(__name__)


class SecurityGuard:
    """ASGI middleware: the checks in this module's docstring, then the wrapped app.

    :param keys: the accepted keys, or None (no authentication: ``--no-auth``, or loopback without keys).
    :param cors_origins: origins allowed to call from a browser (``scheme://host[:port]``, exact); an Origin
        header naming another is refused 403.
    """

    def __init__(self, app, keys: KeyStore | None = None, cors_origins: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.keys = keys
        self.cors_origins = frozenset(origin.rstrip("/") for origin in cors_origins)
        self.limiter = RateLimiter()
        self.refused: dict[int, int] = {}  # status -> how many answered here

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_headers = scope.get("headers") or []
        request_id = None
        size = sum(len(name) + len(value) + 4 for name, value in raw_headers)
        extra: list[tuple[bytes, bytes]] = []
        if size > MAX_HEADER_BYTES:
            await self._refuse(send, 431, "request_header_fields_too_large",
                               f"the request's headers are {size} bytes, over the limit of {MAX_HEADER_BYTES}")
            return
        counts: dict[bytes, int] = {}
        for name, _ in raw_headers:
            counts[name.lower()] = counts.get(name.lower(), 0) + 1
        repeated = [name.decode() for name in _SINGLE_HEADERS if counts.get(name, 0) > 1]
        if repeated:
            await self._refuse(send, 400, "bad_request", f"the request has more than one {repeated[0]} header; send "
                               "it once")
            return
        headers = {name.lower(): value for name, value in raw_headers}
        given_id = headers.get(REQUEST_ID_HEADER)
        if given_id is not None:
            if not _REQUEST_ID.fullmatch(given_id):
                await self._refuse(send, 400, "invalid_request_id", "X-Request-ID must be 1-128 characters of "
                                   "[A-Za-z0-9._:/+=-] (no spaces or control characters); send another or none",
                                   param="x-request-id")
                return
            request_id = given_id.decode("ascii")
        else:
            request_id = uuid.uuid4().hex
        extra.append((REQUEST_ID_HEADER, request_id.encode("ascii")))
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        in_query = _credential_in_query(scope.get("query_string", b""))
        if in_query is not None:
            await self._refuse(send, 400, "credentials_in_query",
                               f"the query string holds a credential parameter ({in_query!r}); it is never read: "
                               "send the key as Authorization: Bearer KEY, and rotate this one (query strings are "
                               "logged by proxies)", extra, param=in_query)
            return
        origin = headers.get(b"origin")
        if origin is not None:
            origin_text = origin.decode("latin-1").rstrip("/")
            if origin_text not in self.cors_origins:
                await self._refuse(send, 403, "origin_not_allowed",
                                   "requests from this Origin are not allowed (icr2 serve --cors-origin lists "
                                   "the allowed ones)", extra)
                return
            extra += [(b"access-control-allow-origin", origin_text.encode("latin-1")), (b"vary", b"Origin")]
            if scope.get("method") == "OPTIONS" and b"access-control-request-method" in headers:
                await _send(send, 204, b"", [
                    *extra,
                    (b"access-control-allow-methods", b"GET, POST"),
                    (b"access-control-allow-headers", b"authorization, content-type, x-request-id"),
                    (b"access-control-max-age", b"600")])
                return
        if self.keys is not None and scope.get("path", "") not in PUBLIC_WITHOUT_KEY:
            refused = await self._authenticate(scope, headers, send, extra)
            if refused:
                return

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _authenticate(self, scope, headers: dict[bytes, bytes], send, extra) -> bool:
        """Refuse the request (and return True) unless it carries an accepted key within its rate limit."""
        authorization = headers.get(b"authorization", b"").decode("latin-1").strip()
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        challenge = [(b"www-authenticate", b'Bearer realm="icr2 serve"')]
        if not authorization:
            await self._refuse(send, 401, "invalid_api_key", "no API key: send it as the header Authorization: "
                               "Bearer KEY (the openai client's api_key does)", extra + challenge)
            return True
        if scheme.lower() != "bearer" or not token:
            await self._refuse(send, 401, "invalid_api_key", "the Authorization header is not 'Bearer KEY'; send "
                               "the key as a bearer token", extra + challenge)
            return True
        try:
            key = self.keys.match(token)
        except KeysUnavailable:
            await self._refuse(send, 503, "api_keys_unavailable", "the server's API key file cannot be read since "
                               "it changed; every request is refused until its operator fixes it", extra)
            return True
        if key is None:
            await self._refuse(send, 401, "invalid_api_key", "the API key is not accepted (unknown or revoked)",
                               extra + challenge)
            return True
        wait = self.limiter.admit(key)
        if wait > 0:
            retry = retry_after_seconds(wait)
            await self._refuse(send, 429, "rate_limited", f"this key's rate limit ({key.requests} requests per "
                               f"{key.period:g} s) is used up; retry in {retry} s",
                               [*extra, (b"retry-after", str(retry).encode())])
            return True
        scope.setdefault("state", {})["api_key_name"] = key.name
        return False

    async def _refuse(self, send, status: int, code: str, message: str, headers=(), param: str | None = None) -> None:
        self.refused[status] = self.refused.get(status, 0) + 1
        status, body = openai_error(status, code, message, param)
        await _send(send, status, json.dumps(body).encode(), [(b"content-type", b"application/json"), *headers])


def _credential_in_query(query_string: bytes) -> str | None:
    """The first query parameter named like a credential, or None."""
    if not query_string:
        return None
    for name, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True):
        if name.strip().lower() in CREDENTIAL_PARAMETERS:
            return name.strip()[:40]
    return None


async def _send(send, status: int, payload: bytes, headers) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


__all__ = ["CREDENTIAL_PARAMETERS", "LIVENESS_PATH", "MAX_HEADER_BYTES", "PUBLIC_WITHOUT_KEY", "SECURITY_ERRORS",
           "SecurityGuard"]
