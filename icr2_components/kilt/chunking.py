"""Split a KILT article into passages of about N words, keeping paragraph and character provenance.

The KILT/DPR convention: words are counted over the article's paragraphs in order, a passage closes when it
holds ``passage_words`` words, and a passage may span a paragraph boundary. Each passage remembers where it
starts and ends (paragraph id, character offset within that paragraph), so a KILT provenance span can be
mapped to the passages that overlap it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from icr2_components.text.blank import is_blank

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Passage:
    """One chunk of an article; offsets are (paragraph id, character) pairs, end exclusive."""

    id: str
    wikipedia_id: str
    title: str
    passage_index: int
    text: str
    start_paragraph_id: int
    start_character: int
    end_paragraph_id: int
    end_character: int

    def meta(self) -> dict:
        return {
            "wikipedia_id": self.wikipedia_id,
            "title": self.title,
            "passage_index": self.passage_index,
            "start_paragraph_id": self.start_paragraph_id,
            "start_character": self.start_character,
            "end_paragraph_id": self.end_paragraph_id,
            "end_character": self.end_character,
        }


def passage_id(wikipedia_id: str, passage_index: int, passage_words: int) -> str:
    """Deterministic id: the same article chunked the same way always gets the same ids.

    The chunk size is part of the id so that indexes built with different sizes never collide.
    """
    return f"{wikipedia_id}-w{passage_words}-{passage_index:05d}"


def content_hash(text: str) -> str:
    return hashlib.sha1(" ".join(text.split()).lower().encode("utf-8")).hexdigest()


def chunk_article(
    wikipedia_id: str,
    title: str,
    paragraphs: list[str],
    *,
    passage_words: int = 100,
    skip_title_paragraph: bool = True,
    min_passage_words: int = 1,
) -> list[Passage]:
    """Chunk one article.

    :param paragraphs: the article's ``text`` list; in KILT, paragraph 0 is the title line.
    :param skip_title_paragraph: leave paragraph 0 out of the passages when it merely repeats the title.
    :param min_passage_words: a trailing passage shorter than this is merged into the previous one.
    """
    if passage_words < 1:
        raise ValueError(f"passage_words must be at least 1, got {passage_words}.")
    # (paragraph id, start char, end char) of every word, in order
    words: list[tuple[int, int, int]] = []
    for paragraph_id, paragraph in enumerate(paragraphs):
        if not isinstance(paragraph, str):
            continue
        if paragraph_id == 0 and skip_title_paragraph and paragraph.strip() == title.strip():
            continue
        # a "word" of characters that print nothing (zero-width spaces) is no word: an article of them is empty
        words.extend((paragraph_id, m.start(), m.end()) for m in _WORD.finditer(paragraph) if not is_blank(m.group()))
    if not words:
        return []
    groups = [words[i : i + passage_words] for i in range(0, len(words), passage_words)]
    if len(groups) > 1 and len(groups[-1]) < min_passage_words:
        groups[-2] = groups[-2] + groups.pop()
    passages = []
    for index, group in enumerate(groups):
        pieces: list[str] = []
        first_par, first_start, _ = group[0]
        last_par, _, last_end = group[-1]
        for paragraph_id in range(first_par, last_par + 1):
            begin = first_start if paragraph_id == first_par else 0
            paragraph = paragraphs[paragraph_id]
            end = last_end if paragraph_id == last_par else len(paragraph)
            piece = paragraph[begin:end].strip()
            if piece:
                pieces.append(piece)
        passages.append(
            Passage(
                id=passage_id(wikipedia_id, index, passage_words),
                wikipedia_id=wikipedia_id,
                title=title,
                passage_index=index,
                text="\n".join(pieces),
                start_paragraph_id=first_par,
                start_character=first_start,
                end_paragraph_id=last_par,
                end_character=last_end,
            )
        )
    return passages


def spans_overlap(
    a_start: tuple[int, int], a_end: tuple[int, int], b_start: tuple[int, int], b_end: tuple[int, int]
) -> bool:
    """Half-open spans of (paragraph, character) positions overlap."""
    return a_start < b_end and b_start < a_end
