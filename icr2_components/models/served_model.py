"""A model behind an OpenAI-compatible server (vLLM, llama.cpp, Ollama, TGI, OpenAI): what a pipeline needs to
know of it besides chat completions, which Haystack's ``OpenAIChatGenerator`` does.

* :class:`ServedModel`: where the server is (``api_base_url``, ending in ``/v1``), the model name, the environment
  variable holding the API key, time-out and retries, and the context length (stated, or asked of the server).
* :class:`ServedTokenizer`: counts tokens with the served model's own tokenizer through the server's tokenize
  endpoint, whichever the server has: vLLM and llama.cpp's ``llama-server`` answer ``POST /tokenize``,
  llama-cpp-python's server ``POST /extras/tokenize``, TGI ``POST /tokenize`` with ``inputs``. Ollama and OpenAI
  have none: name a local tokenizer instead (``tokenizer:`` in the backend file).
* :func:`served_tokenizer_spec` / :func:`parse_served_tokenizer`: a served tokenizer written as a string, so the
  components' ``tokenizer`` parameter stays a string in YAML: ``"http://127.0.0.1:8089/v1"`` or
  ``"http://127.0.0.1:8089/v1#smollm2-135m-instruct"`` (model after ``#``).

Every network failure is a :class:`ServedModelError` with one line that names the server and what to do; nothing
hangs (each request has the time-out, and retries are bounded).

What the server is told is checked before the first request (:meth:`ServedModel.check_model_served`, which the
served reader and the gate run at warm-up): a model name the server does not list at ``/v1/models`` is refused in
one line naming the model, the server and the models it does serve (a server that lists none is taken at its
word). An ``api_key_env`` naming a variable that is not set is logged once as a warning naming the variable: a
local server (llama.cpp, vLLM without ``--api-key``, Ollama) takes no key, so the placeholder goes instead; a server
that then refuses it is a :class:`ServedModelError` naming the unset variable. Each reply records the model the
server reports answering with (``meta["model"]``), not the name asked for.

Usage example:
```python
from icr2_components.models.served_model import ServedModel

served = ServedModel(api_base_url="http://127.0.0.1:8089/v1", model="smollm2-135m-instruct")
print(served.served_tokenizer().count("What is the capital of France?"), served.resolved_context_length())
```
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Any

from icr2_components.errors import ContextTooLongError, UserInputError
from icr2_components.retrying import RetryPolicy
from icr2_components.strict_mapping import check_known_keys, dataclass_from_mapping

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_RETRIES = 2
# what a backend file may set: beyond these a value is a typo (an hour per request, 20 retries, 10M tokens)
MAX_TIMEOUT_S = 3600.0
MAX_RETRIES = 20
MAX_CONTEXT_LENGTH = 10_000_000
# backoff between retries of a request to the server: 0.5 s, 1 s, 2 s... (a restarting server needs seconds)
RETRY_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
NO_KEY = "no-key"
"""Sent as the API key when ``api_key_env`` is unset: local servers (llama.cpp, vLLM, Ollama) ignore it."""
# seconds the warm-up's GET /v1/models may take: a hanging server is reported by the chat request's own time-out
MODEL_CHECK_TIMEOUT_S = 10.0

logger = logging.getLogger(__name__)


class ServedModelError(UserInputError):
    """The LLM server is unreachable, timed out, or answered something that is not what the API promises."""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _attempts(retries: int) -> str:
    return "1 attempt" if retries == 0 else f"{retries + 1} attempts"


@dataclass(frozen=True)
class ServedModel:
    """An OpenAI-compatible server and one model on it.

    :param api_base_url: The API root, e.g. ``http://127.0.0.1:8089/v1`` (llama.cpp), ``http://host:8000/v1``
        (vLLM), ``http://127.0.0.1:11434/v1`` (Ollama), ``https://api.openai.com/v1``.
    :param model: The model name the server knows (``--model_alias``, ``--served-model-name``, ``gpt-4o-mini``).
    :param api_key_env: Environment variable holding the API key; None sends a placeholder. Named but unset: the
        placeholder too (local servers take no key), with one warning naming the variable; a server that refuses
        it is an error naming the unset variable.
    :param timeout_s: Seconds one request may take before it counts as failed.
    :param max_retries: Retries, with backoff, after a connection error or time-out (chat completions: also a 429
        or 5xx, by the OpenAI client's own retries); then the error is raised.
    :param context_length: The served model's context in tokens; None asks the server (vLLM's ``/v1/models``
        ``max_model_len``, llama.cpp's ``/props``), and when it does not say, only the server's own refusal
        stops an over-long prompt.
    :param tokenizer: ``server`` (the server's tokenize endpoint) or a local tokenizer (bundled alias, path or
        Hugging Face id) for servers without one (Ollama, OpenAI).
    """

    api_base_url: str
    model: str
    api_key_env: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_retries: int = DEFAULT_MAX_RETRIES
    context_length: int | None = None
    tokenizer: str = "server"

    def __post_init__(self) -> None:
        check_server_settings(self.api_base_url, self.model, self.timeout_s, self.max_retries, self.context_length)
        if not isinstance(self.tokenizer, str) or not self.tokenizer.strip():
            raise UserInputError(f"tokenizer must be 'server' or a tokenizer name, got {self.tokenizer!r}.")

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "served model") -> ServedModel:
        if not isinstance(values, dict):
            raise UserInputError(f"{source} must be a mapping (api_base_url, model, ...), got {values!r}.")
        check_known_keys(values, (f.name for f in fields(cls)), source, UserInputError)
        missing = [name for name in ("api_base_url", "model") if not values.get(name)]
        if missing:
            raise UserInputError(f"{source}: set {' and '.join(missing)} (e.g. api_base_url: http://127.0.0.1:8089/v1).")
        # each key against its declared type (strict: no bool or NaN for timeout_s, no "3" for max_retries)
        return dataclass_from_mapping(cls, dict(values), source, UserInputError)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def server_root(self) -> str:
        """The server's root URL (the API root without its trailing ``/v1``), where tokenize endpoints live."""
        return server_root(self.api_base_url)

    def api_key(self) -> str:
        """The key from ``api_key_env``, or a placeholder when none is configured or the variable is unset (then
        logged once per variable and server as a warning naming it: a local server takes no key, a remote one
        will refuse the placeholder, and that refusal names the variable too)."""
        if self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if value:
                return value
            if (self.api_key_env, self.api_base_url) not in _WARNED_UNSET_KEYS:
                _WARNED_UNSET_KEYS.add((self.api_key_env, self.api_base_url))
                logger.warning("api_key_env names %s, which is not set (or empty) in the environment: the requests "
                               "to %s go without a key. Export %s, or remove api_key_env if the server takes no key.",
                               self.api_key_env, self.api_base_url, self.api_key_env)
        return NO_KEY

    def key_is_unset(self) -> bool:
        """Whether ``api_key_env`` names a variable that is not set (or is empty)."""
        return bool(self.api_key_env) and not os.environ.get(self.api_key_env)

    def check_model_served(self) -> bool:
        """Refuse a model name the server does not serve, before anything is sent to it.

        Asks ``GET <api_base_url>/models`` once (zero retries, at most ``MODEL_CHECK_TIMEOUT_S``): when the server
        lists models and ``model`` is not one of them (Ollama's ``name`` also matches its ``name:latest``), raises a
        :class:`ServedModelError` naming the model, the server and the models it serves. A server that does not
        list models (no such route, an error, not an OpenAI list, a key it wants) is not judged here.

        :returns: True when the question is settled (served, or the server lists none), False when the server could
            not be reached (the first real request then reports it; call again later to check).
        :raises ServedModelError: the server lists models and ``model`` is not among them.
        """
        key = (self.api_base_url, self.model)
        if key in _MODELS_CHECKED:
            return True
        listed = list_served_models(self.api_base_url, min(self.timeout_s, MODEL_CHECK_TIMEOUT_S), self.api_key())
        if listed is _UNREACHABLE:
            return False
        if listed is not None and not model_is_listed(self.model, listed):
            models_url = self.api_base_url.rstrip("/") + "/models"
            shown = ", ".join(repr(name) for name in listed[:20]) + (f" and {len(listed) - 20} more"
                                                                     if len(listed) > 20 else "")
            raise ServedModelError(
                f"The LLM server at {self.api_base_url} does not serve model {self.model!r}; it serves "
                f"{shown or 'no model'} (GET {models_url}). Set the model name (served_model.model in the backend "
                "file, or the reader's model) to one it serves."
            )
        _MODELS_CHECKED.add(key)
        return True

    def tokenizer_spec(self) -> str:
        """What a component's ``tokenizer`` parameter holds to count with this model's tokenizer."""
        if self.tokenizer == "server":
            return served_tokenizer_spec(self.api_base_url, self.model)
        return self.tokenizer

    def served_tokenizer(self) -> ServedTokenizer:
        """Counts with the server's tokenize endpoint (whatever ``tokenizer`` says: this is the server's own)."""
        return ServedTokenizer(self.api_base_url, self.model, timeout_s=self.timeout_s, max_retries=self.max_retries)

    def resolved_context_length(self) -> int | None:
        """``context_length`` when stated, else what the server says (cached per server), else None."""
        if self.context_length:
            return int(self.context_length)
        return discover_context_length(self.api_base_url, self.model, self.timeout_s)


_WARNED_UNSET_KEYS: set[tuple[str, str]] = set()
_MODELS_CHECKED: set[tuple[str, str]] = set()
_UNREACHABLE: Any = object()  # list_served_models: no answer at all (as opposed to None: an answer, but no list)


def model_is_listed(model: str, listed: list[str]) -> bool:
    """Whether ``model`` is one of the ids a server lists; ``name`` matches ``name:latest`` (Ollama answers to
    both)."""
    return model in listed or f"{model}:latest" in listed


def list_served_models(api_base_url: str, timeout_s: float, api_key: str = NO_KEY) -> Any:
    """The model ids ``GET <api_base_url>/models`` lists; None when the server answers but lists none (no such
    route, an error status, not an OpenAI model list); ``_UNREACHABLE`` when it does not answer."""
    import httpx

    try:
        with httpx.Client() as client:
            status, body = _request_json(client, "GET", api_base_url.rstrip("/") + "/models", None, timeout_s, 0,
                                         headers={"Authorization": f"Bearer {api_key}"})
    except ServedModelError:  # not reachable or timed out: the first real request says so, with its retries
        return _UNREACHABLE
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return None
    ids = [entry.get("id") for entry in body["data"] if isinstance(entry, dict)]
    if not ids or not all(isinstance(name, str) for name in ids):
        return None  # an empty or odd list says nothing about what the server answers to
    return ids


def check_server_settings(api_base_url: object, model: object, timeout_s: object, max_retries: object,
                          context_length: object) -> None:
    """The checks every component taking a server runs in ``__init__``: one clear line per bad value."""
    if not isinstance(api_base_url, str) or not api_base_url.startswith(("http://", "https://")):
        raise UserInputError(
            f"api_base_url must be an http(s) URL such as http://127.0.0.1:8089/v1, got {api_base_url!r}."
        )
    check_url_host_and_port(api_base_url, "api_base_url")
    if not isinstance(model, str) or not model.strip():
        raise UserInputError(f"model must name the served model (as the server's /v1/models lists it), got {model!r}.")
    if (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= MAX_TIMEOUT_S
            or timeout_s != timeout_s):
        raise UserInputError(f"timeout_s must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g} (one "
                             f"request's wait), got {timeout_s!r}.")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or not 0 <= max_retries <= MAX_RETRIES:
        raise UserInputError(f"max_retries must be a whole number from 0 to {MAX_RETRIES}, got {max_retries!r}.")
    if context_length is not None and (isinstance(context_length, bool) or not isinstance(context_length, int)
                                       or not 1 <= context_length <= MAX_CONTEXT_LENGTH):
        raise UserInputError(
            f"context_length must be a whole number of tokens from 1 to {MAX_CONTEXT_LENGTH:,} or null (ask the "
            f"server), got {context_length!r}."
        )


def check_url_host_and_port(url: str, name: str) -> None:
    """An http(s) URL with a host and, if it names one, a port from 1 to 65535 (checked before any request, so a
    mistyped port fails now instead of after every retry)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if not parts.hostname:
        raise UserInputError(f"{name} must name a host, as in http://127.0.0.1:8089/v1, got {url!r}.")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise UserInputError(f"{name}'s port must be from 1 to 65535, got {parts.netloc.rpartition(':')[2]!r} in "
                             f"{url!r}.")


def server_root(api_base_url: str) -> str:
    """``http://host:8089/v1`` -> ``http://host:8089``: tokenize and props endpoints live at the server's root."""
    root = api_base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def served_tokenizer_spec(api_base_url: str, model: str | None = None) -> str:
    """The string a component's ``tokenizer`` parameter holds for a served model's tokenizer."""
    return api_base_url.rstrip("/") + (f"#{model}" if model else "")


def is_served_tokenizer(spec: object) -> bool:
    return isinstance(spec, str) and spec.startswith(("http://", "https://"))


def parse_served_tokenizer(spec: str) -> tuple[str, str | None]:
    """``"http://h:8089/v1#name"`` -> ``("http://h:8089/v1", "name")``; no fragment -> model None."""
    url, _, model = spec.partition("#")
    return url, (model or None)


_FAILURE_HINT = "Start the server (llama.cpp here: bash scripts/llama_server.sh start) or fix api_base_url."


def _request_give_up(method: str, url: str, timeout_s: float):
    """The error a request raises once its retries are spent: one line naming the server and what to do."""
    import httpx

    def give_up(attempts: int, _seconds: float, last: BaseException) -> ServedModelError:
        if isinstance(last, httpx.TimeoutException):
            return ServedModelError(f"The LLM server did not answer {method} {url} within {timeout_s:g} s "
                                    f"({_attempts(attempts - 1)}). {_FAILURE_HINT}")
        return ServedModelError(f"The LLM server at {url} is not reachable ({_one_line(last)}; "
                                f"{_attempts(attempts - 1)}). {_FAILURE_HINT}")

    return give_up


def _request_policy(retries: int) -> RetryPolicy:
    return RetryPolicy(max_retries=retries, initial_backoff=RETRY_BACKOFF_S, max_backoff=MAX_BACKOFF_S)


def _transport_failure(error: BaseException) -> bool:
    """httpx.TimeoutException is a TransportError: both are failures to get an answer, worth another attempt."""
    import httpx

    return isinstance(error, httpx.TransportError)


def _status_and_json(response) -> tuple[int, Any]:
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, None


def _request_json(client, method: str, url: str, body: dict | None, timeout_s: float, retries: int,
                  headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, parsed JSON or None) for one request, retrying connection errors and time-outs ``retries`` times
    with backoff (:class:`~icr2_components.retrying.RetryPolicy`); then a :class:`ServedModelError` naming the
    server and the last error."""
    response = _request_policy(retries).call(
        lambda: client.request(method, url, json=body, timeout=timeout_s, headers=headers),
        retry_if=_transport_failure, give_up=_request_give_up(method, url, timeout_s))
    return _status_and_json(response)


async def _request_json_async(client, method: str, url: str, body: dict | None, timeout_s: float,
                              retries: int) -> tuple[int, Any]:
    """:func:`_request_json` on an ``httpx.AsyncClient``: the same retries, time-out and errors, awaited."""
    response = await _request_policy(retries).call_async(
        lambda: client.request(method, url, json=body, timeout=timeout_s),
        retry_if=_transport_failure, give_up=_request_give_up(method, url, timeout_s))
    return _status_and_json(response)


def _tried(style: tuple, status: int, body: Any) -> str:
    """One tokenize attempt for a message: the endpoint, the status and, when it answered, what it said."""
    said = "no JSON" if body is None else repr(_one_line(body)[:60])
    return f"{style[0]} -> {status}" + (f" {said}" if status == 200 else "")


def _count_from(body: Any) -> int | None:
    """Token count from any tokenize endpoint's answer: ``{"count"}``, ``{"tokens": [...]}`` or TGI's list."""
    if isinstance(body, dict):
        if isinstance(body.get("count"), int):
            return body["count"]
        if isinstance(body.get("tokens"), list):
            return len(body["tokens"])
    if isinstance(body, list):
        return len(body)
    return None


class ServedTokenizer:
    """Counts tokens with a served model's tokenizer, through the server's tokenize endpoint.

    Behaves as much like a Hugging Face tokenizer as ``PassageTokenCounter`` needs:
    ``tokenizer(texts, add_special_tokens=False)["input_ids"]`` gives one list per text (of the right length;
    the ids themselves are the server's). Texts go as concurrent requests (``workers``) on one connection pool.
    """

    # The endpoint styles, tried in order until one answers; the first that works is kept for this server.
    STYLES = (
        ("/tokenize", lambda text, model: {"model": model, "prompt": text, "content": text, "inputs": text,
                                           "add_special_tokens": False, "add_special": False}),
        ("/extras/tokenize", lambda text, model: {"input": text, "model": model}),
    )

    def __init__(self, api_base_url: str, model: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_retries: int = DEFAULT_MAX_RETRIES, workers: int = 8) -> None:
        import httpx

        self.api_base_url = api_base_url
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.workers = workers
        self._root = server_root(api_base_url)
        self._client = httpx.Client()
        self._style: tuple | None = None
        self._lock = threading.Lock()

    def _request(self, style: tuple, text: str) -> tuple[str, dict]:
        """The URL and body of one tokenize request in ``style``."""
        return self._root + style[0], style[1](text, self.model)

    def _no_endpoint(self, tried: list[str]) -> ServedModelError:
        if any(" -> 200 " in attempt for attempt in tried):  # something answered, but not a tokenizer
            return ServedModelError(
                f"The server at {self._root} answered its tokenize endpoints with something that is not a token "
                f"list ({'; '.join(tried)}): it is not an LLM server this library knows. Check that api_base_url "
                "points at the LLM server, or name a local tokenizer (tokenizer: <HF id, path or alias>).")
        return ServedModelError(
            f"The server at {self._root} has no tokenize endpoint this library knows ({', '.join(tried)}). "
            "Name a local tokenizer instead (tokenizer: <HF id, path or alias> in the backend file)."
        )

    @staticmethod
    def _counted(style: tuple, status: int, body: Any) -> int:
        """The count in a tokenize answer of the endpoint style already chosen, or one line saying what came."""
        count = _count_from(body) if status == 200 else None
        if count is None:
            raise ServedModelError(f"The server's {style[0]} answered {status} with {_one_line(body)[:120]!r}, not a "
                                   "token list; check that api_base_url points at the LLM server.")
        return count

    def _pick_style(self, text: str) -> int:
        tried = []
        for style in self.STYLES:
            status, body = _request_json(self._client, "POST", *self._request(style, text), self.timeout_s,
                                         self.max_retries)
            count = _count_from(body) if status == 200 else None
            if count is not None:
                self._style = style
                return count
            tried.append(_tried(style, status, body))
        raise self._no_endpoint(tried)

    def count(self, text: str) -> int:
        with self._lock:
            style = self._style
            if style is None:
                return self._pick_style(text)
        status, body = _request_json(self._client, "POST", *self._request(style, text), self.timeout_s,
                                     self.max_retries)
        return self._counted(style, status, body)

    def count_many(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        first = self.count(texts[0])  # settles the endpoint style before the concurrent requests
        if len(texts) == 1:
            return [first]
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return [first, *pool.map(self.count, texts[1:])]

    async def count_many_async(self, texts: list[str]) -> list[int]:
        """:meth:`count_many` awaited: the requests go together (at most ``workers`` at once) on an
        ``httpx.AsyncClient``, with the same retries, time-out and errors."""
        import asyncio

        import httpx

        if not texts:
            return []
        slots = asyncio.Semaphore(self.workers)
        async with httpx.AsyncClient() as client:

            async def count(style: tuple, text: str) -> tuple[int, Any]:
                async with slots:
                    return await _request_json_async(client, "POST", *self._request(style, text), self.timeout_s,
                                                     self.max_retries)

            counts: list[int] = []
            if self._style is None:  # settles the endpoint style before the concurrent requests
                tried = []
                for style in self.STYLES:
                    status, body = await count(style, texts[0])
                    first = _count_from(body) if status == 200 else None
                    if first is not None:
                        self._style = style
                        counts.append(first)
                        break
                    tried.append(_tried(style, status, body))
                else:
                    raise self._no_endpoint(tried)
            style = self._style
            answers = await asyncio.gather(*(count(style, text) for text in texts[len(counts):]))
            return counts + [self._counted(style, status, body) for status, body in answers]

    def __call__(self, texts: str | list[str], add_special_tokens: bool = False) -> dict[str, list]:
        single = isinstance(texts, str)
        counts = self.count_many([texts] if single else list(texts))
        ids = [[0] * n for n in counts]  # lengths are what counting needs; the ids stay on the server
        return {"input_ids": ids[0] if single else ids}


_CONTEXT_WORDS = ("context", "too long", "maximum", "exceed", "n_ctx")


@contextmanager
def served_chat_errors(served: ServedModel, hint: str = "") -> Iterator[None]:
    """Turns what the OpenAI client raises around one chat completion into one line naming the server.

    A server that is down, slow or refuses the key is a :class:`ServedModelError` (after the client's bounded
    retries: ``served.max_retries`` and ``served.timeout_s``); a prompt the server refuses as too long is a
    ``ContextTooLongError``; an answer that is not a chat completion is a ``ServedModelError`` too. ``hint`` is
    added to a 4xx that is not about the context (e.g. which argument to change).

    Usage example:
    ```python
    with served_chat_errors(served):
        result = generator.run(messages=messages)   # Haystack's OpenAIChatGenerator
    ```
    """
    import openai

    where = f"The LLM server at {served.api_base_url} (model {served.model})"
    try:
        yield
    except openai.APITimeoutError as error:
        raise ServedModelError(
            f"{where} did not answer within {served.timeout_s:g} s "
            f"({_attempts(served.max_retries)}). Raise timeout_s or check the server."
        ) from error
    except openai.APIConnectionError as error:
        raise ServedModelError(
            f"{where} is not reachable ({_one_line(error)}, {_attempts(served.max_retries)}). {_FAILURE_HINT}"
        ) from error
    except openai.AuthenticationError as error:
        if served.key_is_unset():
            given = f" (none sent: ${served.api_key_env} is not set; export {served.api_key_env})"
        elif served.api_key_env:
            given = f" from ${served.api_key_env}"
        else:
            given = " (none configured: set api_key_env)"
        raise ServedModelError(f"{where} refused the API key{given}: {_one_line(error.message)}") from error
    except openai.NotFoundError as error:
        raise ServedModelError(
            f"{where} answered 404: {_one_line(error.message)}. Check the model name against "
            f"GET {served.api_base_url.rstrip('/')}/models and that api_base_url ends in /v1."
        ) from error
    except openai.APIStatusError as error:
        message = _one_line(error.message)
        if error.status_code in (400, 413, 422) and any(w in message.lower() for w in _CONTEXT_WORDS):
            raise ContextTooLongError(
                f"{where} refused the prompt as too long: {message}. Shorten the context "
                "(a smaller budget in the corpus builder)."
            ) from error
        extra = f" {hint}" if hint and 400 <= error.status_code < 500 else ""
        raise ServedModelError(f"{where} answered {error.status_code}: {message}{extra}") from error
    except (
        openai.APIResponseValidationError,
        AssertionError,
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
    ) as error:
        # Haystack asserts the response type; openai parses HTML or junk into a str, not a ChatCompletion
        if isinstance(error, UserInputError):
            raise
        raise ServedModelError(
            f"{where} answered something that is not an OpenAI chat completion "
            f"({type(error).__name__}: {_one_line(error)[:200]})."
        ) from error


_DISCOVERED: dict[tuple[str, str], int | None] = {}


def discover_context_length(api_base_url: str, model: str, timeout_s: float = 10.0) -> int | None:
    """The served model's context as the server states it (vLLM ``max_model_len``, llama.cpp ``n_ctx``), or None."""
    import httpx

    key = (api_base_url, model)
    if key in _DISCOVERED:
        return _DISCOVERED[key]
    found: int | None = None
    with httpx.Client() as client:
        status, body = _request_json(client, "GET", api_base_url.rstrip("/") + "/models", None, timeout_s, 0)
        if status == 200 and isinstance(body, dict):
            for entry in body.get("data") or []:
                if isinstance(entry, dict) and entry.get("id") == model and isinstance(entry.get("max_model_len"), int):
                    found = entry["max_model_len"]
        if found is None:
            status, body = _request_json(client, "GET", server_root(api_base_url) + "/props", None, timeout_s, 0)
            if status == 200 and isinstance(body, dict):
                n_ctx = (body.get("default_generation_settings") or {}).get("n_ctx") or body.get("n_ctx")
                found = n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None
    _DISCOVERED[key] = found
    return found


__all__ = [
    "ServedModel",
    "ServedModelError",
    "ServedTokenizer",
    "check_server_settings",
    "discover_context_length",
    "is_served_tokenizer",
    "list_served_models",
    "model_is_listed",
    "parse_served_tokenizer",
    "served_chat_errors",
    "served_tokenizer_spec",
    "server_root",
]
