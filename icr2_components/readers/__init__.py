"""Readers: generators that answer from a (possibly long) context."""

from icr2_components.readers.local_chat_reader import LocalChatReader, messages_to_dicts
from icr2_components.readers.contrastive_decoding_reader import ContextAwareDecodingReader, MissingContextError

__all__ = ["ContextAwareDecodingReader", "LocalChatReader", "MissingContextError", "messages_to_dicts"]
