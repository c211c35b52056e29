"""Readers: generators that answer from a (possibly long) context."""

from icr2_components.readers.local_chat_reader import LocalChatReader, messages_to_dicts
from icr2_components.readers.contrastive_decoding_reader import ContextAwareDecodingReader, MissingContextError
from icr2_components.readers.head_suppression_reader import HeadSuppressionReader

__all__ = ["ContextAwareDecodingReader", "HeadSuppressionReader", "LocalChatReader", "MissingContextError", "messages_to_dicts"]
