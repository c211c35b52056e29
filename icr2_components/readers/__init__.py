"""Readers: generators that answer from a (possibly long) context."""

from icr2_components.errors import MissingContextError
from icr2_components.readers.context_aware_decoding_reader import ContextAwareDecodingReader
from icr2_components.readers.head_suppression_reader import HeadSuppressionReader
from icr2_components.readers.local_chat_reader import LocalChatReader
from icr2_components.readers.retrieval_reply_parser import RetrievalReplyParser
from icr2_components.readers.served_chat_reader import ServedChatReader

__all__ = [
    "ContextAwareDecodingReader",
    "HeadSuppressionReader",
    "LocalChatReader",
    "MissingContextError",
    "RetrievalReplyParser",
    "ServedChatReader",
]
