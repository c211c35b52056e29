"""One line for an Elasticsearch failure: which node, what it answered or why it was unreachable, what to do.

The CLI prints this instead of a traceback; it reads the URL from the exception chain (the client's node, or
urllib3's connection) and, failing that, from the config's ``store.hosts``, credentials always removed.

Usage:
    >>> from icr2_components.stores.elasticsearch.errors import describe_elasticsearch_error
    >>> describe_elasticsearch_error(error, "indexing/kilt-sample-elasticsearch.yaml")
    'Elasticsearch is unreachable at http://127.0.0.1:9200 ([Errno 111] Connection refused). Start a local node ...'
"""

from __future__ import annotations

from typing import Any

from icr2_components.stores.elasticsearch.store import redact_url

START_ELASTICSEARCH = "bash scripts/elasticsearch.sh start"


def one_line(text: object) -> str:
    """The text with its line breaks and runs of spaces folded into single spaces."""
    return " ".join(str(text).split())


def _chain(error: BaseException):
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _url_from_error(error: BaseException) -> str | None:
    """The node URL an Elasticsearch failure was about, from the exception chain (urllib3 keeps the connection)."""
    for item in _chain(error):
        url = getattr(item, "url", None)
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            return redact_url(url)
        node = getattr(getattr(item, "meta", None), "node", None)
        if node is not None and getattr(node, "host", None):
            return f"{node.scheme}://{node.host}:{node.port}"
        for attribute in ("conn", "pool"):  # urllib3: NewConnectionError.conn, a timeout's pool (read lazily:
            holder = getattr(item, attribute, None)  # NewConnectionError.pool is deprecated and warns)
            host = getattr(holder, "host", None)
            if host:
                scheme = getattr(holder, "scheme", None) or ("https" if "HTTPS" in type(holder).__name__ else "http")
                port = getattr(holder, "port", None)
                return f"{scheme}://{host}" + (f":{port}" if port else "")
    return None


def _hosts_from_config(path: str | None) -> str | None:
    if not path:
        return None
    try:
        import yaml

        with open(path) as handle:
            store = (yaml.safe_load(handle) or {}).get("store") or {}
        hosts = store.get("hosts")
    except Exception:  # only a hint for the message
        return None
    if isinstance(hosts, list):
        hosts = ", ".join(str(h) for h in hosts)
    return (
        ", ".join(redact_url(h.strip()) for h in hosts.split(",")) if isinstance(hosts, str) and hosts.strip() else None
    )


def _api_error_reason(error: Any) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        details = body["error"]
        root = (details.get("root_cause") or [{}])[0] if isinstance(details.get("root_cause"), list) else {}
        caused_by = details.get("caused_by") or {}
        reasons = [details.get("reason"), root.get("reason"), caused_by.get("reason")]
        unique = [r for i, r in enumerate(reasons) if r and r not in reasons[:i]]
        if unique:
            return "; ".join(str(r) for r in unique)
    if isinstance(body, dict) and body.get("error"):
        return str(body["error"])
    return str(getattr(error, "message", "") or body or "no reason given")


def describe_elasticsearch_error(error: BaseException, config: str | None = None) -> str | None:
    """One line for an ``elastic_transport``/``elasticsearch`` exception, else None.

    ``config`` is the index config file the command was given, if any: named in the hints, and its
    ``store.hosts`` stand in for the node URL when the exception does not carry one.
    """
    try:
        import elastic_transport
    except ImportError:  # pragma: no cover - installed with elasticsearch-haystack
        return None
    where = f" in {config}" if config else ""
    try:
        from elasticsearch import ApiError
    except ImportError:  # pragma: no cover
        ApiError = ()  # type: ignore[assignment]
    if ApiError and isinstance(error, ApiError):
        url = _url_from_error(error) or _hosts_from_config(config) or "the configured host"
        status = getattr(error, "status_code", None) or getattr(getattr(error, "meta", None), "status", "?")
        kind = getattr(error, "error", None) or getattr(error, "message", "") or type(error).__name__
        message = f"Elasticsearch at {url} answered {status} {kind}: {one_line(_api_error_reason(error))}"
        if status == 404 and "index_not_found" in str(kind):
            message += f". Build the index first with `icr2 index --config {config or 'indexing/<name>.yaml'}`"
        elif status in (401, 403):
            message += ". Check the credentials (ELASTIC_API_KEY / ELASTIC_API_KEY_ID, or user:password in store.hosts)"
        return message + "."
    if isinstance(error, (elastic_transport.ConnectionError, elastic_transport.ConnectionTimeout)):
        url = _url_from_error(error) or _hosts_from_config(config) or "the configured host (store.hosts)"
        if isinstance(error, elastic_transport.TlsError):
            return (f"TLS error talking to Elasticsearch at {url}: {one_line(getattr(error, 'message', error))}. "
                    f"Check the scheme (http/https) and certificates of store.hosts{where}.")
        if isinstance(error, elastic_transport.ConnectionTimeout):
            reason = "the request timed out"
        else:
            reason = one_line(getattr(error, "message", "") or error)
            reason = reason.split(": ")[-1] if ": " in reason else reason  # "[Errno 111] Connection refused"
        return (f"Elasticsearch is unreachable at {url} ({reason}). Start a local node with `{START_ELASTICSEARCH}`, "
                f"or point store.hosts{where} at a running cluster.")
    if isinstance(error, elastic_transport.TransportError):
        return f"Elasticsearch transport error: {type(error).__name__}: {one_line(getattr(error, 'message', error))}"
    return None


__all__ = ["START_ELASTICSEARCH", "describe_elasticsearch_error"]
