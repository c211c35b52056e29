"""Haystack chat messages as the ``[{"role", "content"}]`` list a tokenizer's chat template takes."""

from __future__ import annotations

from haystack.dataclasses import ChatMessage


def messages_to_dicts(messages: list[ChatMessage]) -> list[dict[str, str]]:
    """``[{"role": ..., "content": ...}]`` for ``tokenizer.apply_chat_template``; only text messages render.

    Usage example:
    ```python
    ids = tokenizer.apply_chat_template(messages_to_dicts([ChatMessage.from_user("Hi")]), add_generation_prompt=True)
    ```
    """
    converted = []
    for index, message in enumerate(messages):
        text = message.text
        if text is None:
            raise ValueError(
                f"Only text messages can be rendered with a chat template; message {index} "
                f"(a {message.role.value} message) has no text."
            )
        converted.append({"role": message.role.value, "content": text})
    return converted
