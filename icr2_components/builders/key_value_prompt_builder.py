"""KeyValueRetrievalPromptBuilder: Lost in the Middle's synthetic key-value retrieval prompt (its figure 7)."""

from __future__ import annotations

import json
from typing import Any

from haystack import Document, component
from haystack.dataclasses import ChatMessage

from icr2_components.errors import UserInputError
from icr2_components.parameters import boolean

INSTRUCTION = "Extract the value corresponding to the specified key in the JSON object below."


def format_key_value_pairs(pairs: list[tuple[str, str]]) -> str:
    """The pairs as figure 7 prints them: one JSON object, a pair per line, each line after the first indented by
    one space (``{"k1": "v1",\\n "k2": "v2"}``). Keys and values are JSON-quoted, so any string is safe."""
    lines = [f"{json.dumps(key)}: {json.dumps(value)}" for key, value in pairs]
    return "{" + ",\n ".join(lines) + "}"


def key_value_prompt(pairs: list[tuple[str, str]], key: str, query_aware: bool = False) -> str:
    """The prompt text: the instruction, ``JSON data:``, the object, then the key and ``Corresponding value:``.
    ``query_aware`` also puts the key before the data (Lost in the Middle's query-aware contextualization, its
    section 5.2), so a decoder-only reader reads the data knowing what it looks for."""
    asked = f"Key: {json.dumps(key)}"
    head = [INSTRUCTION, asked] if query_aware else [INSTRUCTION]
    return "\n".join([*head, "JSON data:", format_key_value_pairs(pairs), asked, "Corresponding value:"])


def pairs_from_documents(documents: Any, key_field: str) -> list[list[str]]:
    """The pairs of ``documents``, one pair each: the key in ``meta[key_field]``, the value the content."""
    if not isinstance(documents, (list, tuple)) or not documents:
        raise UserInputError(f"documents must be a non-empty list of Documents, got {documents!r:.80}.")
    pairs = []
    for index, document in enumerate(documents):
        if not isinstance(document, Document):
            raise UserInputError(f"documents[{index}] must be a Document, got {type(document).__name__}.")
        key = (document.meta or {}).get(key_field)
        if not isinstance(key, str) or not isinstance(document.content, str):
            raise UserInputError(f"documents[{index}] ({document.id}) must carry its key as a string in "
                                 f"meta[{key_field!r}] and its value as its content.")
        pairs.append([key, document.content])
    return pairs


def check_pairs(pairs: Any, key: Any) -> list[tuple[str, str]]:
    """The pairs as ``(key, value)`` string tuples, refusing what would make the task ill-posed: no pairs, a pair
    that is not two strings, a key asked that is not among the keys or is there more than once."""
    if not isinstance(key, str) or not key:
        raise UserInputError(f"key must be a non-empty string, got {key!r}.")
    if not isinstance(pairs, (list, tuple)) or not pairs:
        raise UserInputError(f"pairs must be a non-empty list of [key, value] pairs, got {pairs!r:.80}.")
    checked = []
    for index, pair in enumerate(pairs):
        if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                or not all(isinstance(part, str) for part in pair)):
            raise UserInputError(f"pairs[{index}] must be a [key, value] pair of two strings, got {pair!r:.80}.")
        checked.append((pair[0], pair[1]))
    found = sum(1 for pair_key, _ in checked if pair_key == key)
    if found != 1:
        raise UserInputError(f"the key asked must be among the pairs' keys exactly once; {key!r} is there {found} "
                             "time(s).")
    return checked


@component
class KeyValueRetrievalPromptBuilder:
    """
    Builds Lost in the Middle's synthetic key-value retrieval prompt: a JSON object of key-value pairs (random UUIDs
    in the paper) and one key whose value the reader must return. Where the asked pair sits in the object is the
    experiment's variable (``pairs`` are used in the order given); ``query_aware`` puts the key before the data as
    well as after it, the paper's query-aware contextualization. The pairs may come as ``documents`` instead, one
    Document a pair (the key in ``meta[key_field]``, default ``title``; the value its content), so that a
    pipeline can be handed the object as passages (``icr2 compare``'s context entry, ``icr2 reproduce
    kv-retrieval``).

    Paper: Liu et al. 2023, "Lost in the Middle: How Language Models Use Long Contexts", section 4 and figure 7:
    https://arxiv.org/abs/2307.03172

    Usage example:
    ```python
    from icr2_components.builders import KeyValueRetrievalPromptBuilder

    builder = KeyValueRetrievalPromptBuilder(query_aware=True)
    pairs = [["2a8d601d-1d69-4e64-9f90-8ad825a74195", "bb3ba2a5-7de8-434b-a86e-a88bb9fa7289"],
             ["9f4a92b9-5f69-4725-ba1e-403f08dea695", "703a7ce5-f17f-4e6d-b895-5836ba5ec71c"]]
    prompt = builder.run(pairs=pairs, key="9f4a92b9-5f69-4725-ba1e-403f08dea695")["prompt"]
    ```
    The reply is scored with ``icr2_components.evaluation.metrics.key_value_match`` (the value appears in it).
    """

    def __init__(self, query_aware: bool = False, key_field: str = "title") -> None:
        """
        :param query_aware: put the key before the JSON object too (query-aware contextualization).
        :param key_field: the meta field holding a pair's key when the pairs come as ``documents``.
        :raises UserInputError: if ``query_aware`` is not a boolean or ``key_field`` not a non-empty string.
        """
        self.query_aware = boolean(query_aware, "query_aware")
        if not isinstance(key_field, str) or not key_field:
            raise UserInputError(f"key_field must be a non-empty string (a meta field), got {key_field!r}.")
        self.key_field = key_field

    @component.output_types(prompt=list[ChatMessage], meta=dict[str, Any])
    def run(self, key: str, pairs: list[list[str]] | None = None, documents: list[Document] | None = None,
            query_aware: bool | None = None) -> dict[str, Any]:
        """
        :param key: the key whose value is asked (one of the pairs' keys, exactly once).
        :param pairs: the object's ``[key, value]`` pairs, in the order they are shown.
        :param documents: the pairs as Documents instead (one each, in order; key in ``meta[key_field]``).
        :param query_aware: overrides the constructor's setting for this call.
        :returns: ``prompt``, one user message; ``meta`` with ``pairs`` (how many) and ``position`` (1-based place
            of the asked pair).
        :raises UserInputError: for no pairs, both or neither of ``pairs`` and ``documents``, a pair that is not two
            strings, or a key not among the keys once.
        """
        boolean(query_aware, "query_aware", optional=True)
        if (pairs is None) == (documents is None):
            raise UserInputError("give the key-value pairs as `pairs` or as `documents`, one of the two.")
        if documents is not None:
            pairs = pairs_from_documents(documents, self.key_field)
        checked = check_pairs(pairs, key)
        aware = self.query_aware if query_aware is None else query_aware
        position = next(index for index, (pair_key, _) in enumerate(checked, start=1) if pair_key == key)
        return {"prompt": [ChatMessage.from_user(key_value_prompt(checked, key, aware))],
                "meta": {"pairs": len(checked), "position": position}}
