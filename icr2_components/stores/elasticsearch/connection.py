"""How an index config reaches its Elasticsearch cluster: hosts, API key or basic auth, TLS CA file.

The same index config works against the project's local node and against any external cluster: only the
connection keys of its ``store:`` section change (the index settings, mapping and writer stay as they are).
Secrets never go in the file: an API key comes from ``ELASTIC_API_KEY`` (or ``ELASTIC_API_KEY_ID`` +
``ELASTIC_API_KEY``), the variables elasticsearch-haystack reads; a basic-auth password from the environment
variable named by ``password_env``. Client docs: https://www.elastic.co/guide/en/elasticsearch/client/python-api/current/connecting.html

Usage (``indexing/my-cluster.yaml``)::

    store:
      type: elasticsearch
      hosts: [https://es1.internal:9200, https://es2.internal:9200, https://es3.internal:9200]
      index: icr2-kilt
      ca_certs: /etc/icr2/cluster-ca.pem   # the CA that signed the cluster's HTTP certificates
      username: icr2_writer                # basic auth; leave out to use ELASTIC_API_KEY instead
      password_env: ELASTIC_PASSWORD       # the variable holding the password

    >>> from icr2_components.stores import load_index_config
    >>> options = connection_options(load_index_config("indexing/my-cluster.yaml").store)
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any, Protocol

from icr2_components.stores.config import ConfigError

__all__ = ["ConnectionSettings", "connection_options", "split_hosts", "validate_connection_settings"]


class ConnectionSettings(Protocol):
    """The connection keys of a ``store:`` section this module reads (``ElasticsearchStoreSettings`` has them)."""

    hosts: str | list[str]
    ca_certs: str | None
    verify_certs: bool
    username: str | None
    password_env: str


def split_hosts(hosts: str | list[str]) -> list[str]:
    """``"http://a:9200, http://b:9200"`` or a list -> a list of URLs."""
    items = [h.strip() for h in hosts.split(",")] if isinstance(hosts, str) else [str(h).strip() for h in hosts]
    items = [h for h in items if h]
    if not items:
        raise ValueError("No Elasticsearch host given (store.hosts, e.g. http://127.0.0.1:9200).")
    return items


def _hosts(settings: ConnectionSettings) -> list[str]:
    return split_hosts(settings.hosts)


def validate_connection_settings(settings: ConnectionSettings) -> None:
    """What can be checked in the file itself (the environment is checked when connecting)."""
    hosts = _hosts(settings)
    if any(not h.startswith(("http://", "https://")) for h in hosts):
        raise ConfigError(f"store.hosts must be http:// or https:// URLs, got {hosts}.")
    if settings.ca_certs is not None:
        if not Path(settings.ca_certs).expanduser().is_file():
            raise ConfigError(
                f"store.ca_certs: no file at {settings.ca_certs}; give the PEM file of the CA that signed the "
                "cluster's certificates."
            )
        if not any(h.startswith("https://") for h in hosts):
            raise ConfigError(
                "store.ca_certs is set but no host in store.hosts is https://; use https URLs, or remove ca_certs."
            )
        if not settings.verify_certs:
            raise ConfigError(
                "store.verify_certs is false, so store.ca_certs would be ignored; keep verification on, or remove "
                "ca_certs."
            )
    if settings.username is not None and not str(settings.username).strip():
        raise ConfigError(
            "store.username is empty; give the basic-auth user, or remove the key to use an API key (ELASTIC_API_KEY)."
        )
    if not settings.password_env or not str(settings.password_env).strip():
        raise ConfigError(
            "store.password_env must name the environment variable that holds the basic-auth password (e.g. "
            "ELASTIC_PASSWORD)."
        )


def connection_options(settings: ConnectionSettings) -> dict[str, Any]:
    """Keyword arguments for ``elasticsearch.Elasticsearch`` (and ``ElasticsearchDocumentStore``) from ``store:``.

    Basic auth is sent as an ``Authorization`` header, which ElasticsearchDocumentStore keeps out of its
    ``to_dict()``: a serialised pipeline never carries the password. An API key is left to the client builders,
    which read ``ELASTIC_API_KEY`` / ``ELASTIC_API_KEY_ID`` as elasticsearch-haystack does.
    """
    options: dict[str, Any] = {}
    if settings.ca_certs is not None:
        options["ca_certs"] = str(Path(settings.ca_certs).expanduser())
    if not settings.verify_certs:
        options["verify_certs"] = False
    if settings.username is not None:
        if os.environ.get("ELASTIC_API_KEY"):
            raise ConfigError(
                "store.username asks for basic auth, but ELASTIC_API_KEY is set too; unset one of them (an API key, or "
                "user and password)."
            )
        password = os.environ.get(settings.password_env)
        if not password:
            raise ConfigError(
                f"store.username is {settings.username!r} but the environment variable {settings.password_env} "
                "(store.password_env) "
                "holding the password is not set; export it before running."
            )
        token = base64.b64encode(f"{settings.username}:{password}".encode()).decode("ascii")
        options["headers"] = {"authorization": f"Basic {token}"}
    return options
