"""Readers: generators that answer from a (possibly long) context."""

from icr2_components.readers.local_chat_reader import LocalChatReader, messages_to_dicts

__all__ = ["LocalChatReader", "messages_to_dicts"]
