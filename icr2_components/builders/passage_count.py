"""The prompt builders' word on their passages: how many the prompt shows, and a flag and a warning when none.

A prompt over no passages is still rendered (a closed-book answer is a legitimate comparison), but never in
silence: an upstream retriever or filter that returned nothing would otherwise let the reader answer from nothing
while the pipeline's output looks like any other. Each builder returns this as its ``meta`` output and logs a
warning naming itself.
"""

from __future__ import annotations

import logging
from typing import Any

from haystack import Document

logger = logging.getLogger(__name__)


def passages_meta(documents: list[Document], builder: str) -> dict[str, Any]:
    """``{"passages": n, "no_passages": n == 0}``; logs a warning naming ``builder`` when there are none."""
    count = len(documents or [])
    if count == 0:
        logger.warning(
            "%s got no passages: the prompt shows none and the reader answers from its own knowledge "
            "(meta['no_passages'] is True). Check the retriever or filter upstream.",
            builder,
        )
    return {"passages": count, "no_passages": count == 0}


__all__ = ["passages_meta"]
