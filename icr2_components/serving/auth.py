"""API keys for ``icr2 serve``: bearer tokens checked against SHA-256 hashes, with optional per-key rate limits.

Keys come from a file of key hashes (``--api-keys-file``) or from an environment variable the user names
(``--api-keys-env NAME``), never from the command line (a command line is visible to every user of the machine and
kept in shell histories). The server holds only hashes: a presented key is hashed and compared with every stored
hash by ``hmac.compare_digest`` (constant time, and every hash is compared, so the time does not tell which or how
many matched). Keys are never logged and never echoed in an error.

The key file, one key a line (``#`` starts a comment)::

    # sha256 of the key                                              name     rate limit (optional)
    5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8  alice    60/min
    6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b  batch    5/s

The hash of a key: ``printf %s "$KEY" | sha256sum`` (or ``hash_key``). The file is checked with a ``stat`` on each
request and read again when it changed, so a key is revoked by deleting its line, without a restart (replace the
file in one step, e.g. write a new file and ``mv`` it over the old one). A file that cannot be read or parsed on a
later reading refuses every request (503 ``api_keys_unavailable``) until it is fixed: a revoked key never comes
back because an edit went wrong.

The environment variable holds the keys themselves, separated by commas or whitespace (each at least
``MIN_KEY_CHARS`` characters), with no names or limits; they are hashed when the server starts (revoking one takes
a restart).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from icr2_components.errors import UserInputError

MIN_KEY_CHARS = 16
_HASH = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_RATE = re.compile(r"(\d+)/(s|sec|second|min|minute|h|hour)")
_PERIODS = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0, "hour": 3600.0}

logger = logging.getLogger(__name__)


def hash_key(key: str) -> str:
    """The SHA-256 hex digest of ``key`` (UTF-8): what a key file holds for it."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ApiKey:
    """One accepted key: its hash, a name (for logs and limits; never the key) and its rate limit, if any."""

    sha256: str
    name: str
    requests: int | None = None  # at most this many requests per `period` seconds (None: no limit)
    period: float = 60.0


def parse_key_file(path: Path) -> list[ApiKey]:
    """The keys of a key file.

    :raises UserInputError: one line naming ``path:LINE`` and what is wrong there (nothing of the line's text is
        repeated: it may hold a key pasted by mistake), or that the file holds no key.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserInputError(f"--api-keys-file {path}: cannot read it ({error.__class__.__name__}); give a readable "
                             "UTF-8 file of key hashes.") from error
    keys: list[ApiKey] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        where = f"--api-keys-file {path}:{number}"
        digest = fields[0].lower()
        if not _HASH.fullmatch(digest):
            raise UserInputError(f"{where}: the first field is not a SHA-256 hex digest (64 hex digits); write the "
                                 "key's hash, never the key: printf %s \"$KEY\" | sha256sum")
        if digest in seen:
            raise UserInputError(f"{where}: this hash is listed twice; keep one line per key.")
        seen.add(digest)
        name, requests, period = f"key-{number}", None, 60.0
        for field in fields[1:]:
            if rate := _RATE.fullmatch(field):
                requests, period = int(rate.group(1)), _PERIODS[rate.group(2)]
                if requests < 1:
                    raise UserInputError(f"{where}: a rate limit must allow at least 1 request, got {field}.")
            elif _NAME.fullmatch(field) and name == f"key-{number}":
                name = field
            else:
                raise UserInputError(f"{where}: {field[:40]!r} is neither a name ([A-Za-z0-9_.@-], at most 64) nor "
                                     "a rate limit (N/s, N/min or N/h); a line is: HASH [NAME] [N/min]")
        keys.append(ApiKey(digest, name, requests, period))
    if not keys:
        raise UserInputError(f"--api-keys-file {path}: holds no key hash; add one line per key (HASH [NAME] "
                             "[N/min]).")
    return keys


def keys_from_env(variable: str, environ: dict[str, str] | None = None) -> list[ApiKey]:
    """The keys in environment variable ``variable`` (separated by commas or whitespace), hashed.

    :raises UserInputError: the variable is unset or empty, or a key is shorter than ``MIN_KEY_CHARS`` (the
        message names the variable and the key's position, never the key).
    """
    environ = os.environ if environ is None else environ
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", variable or ""):
        raise UserInputError(f"--api-keys-env {variable!r}: not an environment variable name; give the NAME of a "
                             "variable holding the keys (never a key itself).")
    value = environ.get(variable, "")
    keys = [key for key in re.split(r"[\s,]+", value) if key]
    if not keys:
        raise UserInputError(f"--api-keys-env {variable}: the variable is unset or empty; export it with the keys, "
                             "separated by commas.")
    for position, key in enumerate(keys, start=1):
        if len(key) < MIN_KEY_CHARS:
            raise UserInputError(f"--api-keys-env {variable}: key {position} is shorter than {MIN_KEY_CHARS} "
                                 "characters; use long random keys (e.g. python -c 'import secrets; "
                                 "print(secrets.token_urlsafe(32))').")
    return [ApiKey(hash_key(key), f"{variable.lower()}-{position}") for position, key in enumerate(keys, start=1)]


class KeysUnavailable(Exception):
    """The key file changed and could not be read again: every request is refused until it is fixed."""


class KeyStore:
    """The accepted keys: from a file (read again whenever its ``stat`` changes) and/or an environment variable.

    :param path: the key file, or None.
    :param env_variable: the environment variable holding keys, or None.
    :raises UserInputError: neither is given, or either is unreadable, malformed or empty (at construction).
    """

    def __init__(self, path: str | os.PathLike | None = None, env_variable: str | None = None) -> None:
        if path is None and env_variable is None:
            raise UserInputError("API keys need --api-keys-file FILE or --api-keys-env NAME.")
        self.path = Path(path) if path is not None else None
        self._env_keys = keys_from_env(env_variable) if env_variable is not None else []
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._file_keys: list[ApiKey] = []
        self._broken: str | None = None
        if self.path is not None:
            self._stamp = self._stat()
            self._file_keys = parse_key_file(self.path)

    def _stat(self) -> tuple | None:
        try:
            status = self.path.stat()
        except OSError:
            return None
        return (status.st_mtime_ns, status.st_size, status.st_ino, status.st_ctime_ns)

    def keys(self) -> list[ApiKey]:
        """The keys accepted now (the file read again if it changed since the last call).

        :raises KeysUnavailable: the file changed and cannot be read or parsed now.
        """
        if self.path is not None:
            stamp = self._stat()
            with self._lock:
                if stamp != self._stamp:
                    self._stamp = stamp
                    try:
                        self._file_keys = parse_key_file(self.path) if stamp is not None else []
                        if stamp is None:
                            raise UserInputError(f"--api-keys-file {self.path}: the file is gone")
                        self._broken = None
                        logger.info("API key file %s read again: %d keys", self.path, len(self._file_keys))
                    except UserInputError as error:
                        self._file_keys, self._broken = [], str(error)
                        logger.error("API keys refused until the key file is fixed: %s", error)
                if self._broken is not None:
                    raise KeysUnavailable(self._broken)
        return self._file_keys + self._env_keys

    def match(self, presented: str) -> ApiKey | None:
        """The key ``presented`` is, or None: its hash compared with every accepted hash in constant time.

        :raises KeysUnavailable: as ``keys``.
        """
        digest = hash_key(presented).encode()
        found = None
        for key in self.keys():  # no early exit: the time does not depend on which key matched
            if hmac.compare_digest(digest, key.sha256.encode()) and found is None:
                found = key
        return found


class RateLimiter:
    """Per-key token buckets: a key with ``requests`` per ``period`` may make that many at once, then one every
    ``period / requests`` seconds. Thread-safe; keyed by the key's hash (a renamed key keeps its bucket)."""

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # hash -> (tokens, when)

    def admit(self, key: ApiKey) -> float:
        """Take one request from ``key``'s bucket.

        :returns: 0.0 when admitted, else the seconds until the key may make its next request.
        """
        if key.requests is None:
            return 0.0
        rate = key.requests / key.period
        now = self._clock()
        with self._lock:
            tokens, when = self._buckets.get(key.sha256, (float(key.requests), now))
            tokens = min(float(key.requests), tokens + (now - when) * rate)
            if tokens >= 1.0:
                self._buckets[key.sha256] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key.sha256] = (tokens, now)
            return (1.0 - tokens) / rate


def retry_after_seconds(wait: float) -> int:
    """A ``Retry-After`` value: whole seconds, at least 1."""
    return max(1, math.ceil(wait))


__all__ = ["MIN_KEY_CHARS", "ApiKey", "KeyStore", "KeysUnavailable", "RateLimiter", "hash_key", "keys_from_env",
           "parse_key_file", "retry_after_seconds"]
