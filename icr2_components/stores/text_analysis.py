"""How BM25 sees text, the same in both stores: the analyzer (``store.analyzer`` in an index config) and the
fields searched (the passage's ``content`` and its ``title``).

Two analyzers, named as Elasticsearch names its built-in ones:

- ``english`` (the default): the standard tokenizer, English possessives removed (``Einstein's`` -> ``einstein``),
  lower case, Lucene's 33 English stop words dropped (``the``, ``of``, ``is``, ...), Porter stemming
  (``prizes``/``prized`` -> ``prize``). This is Elasticsearch's built-in ``english`` analyzer
  (https://www.elastic.co/guide/en/elasticsearch/reference/current/analysis-lang-analyzer.html#english-analyzer)
  and the analysis of the reference BM25 runs on BEIR (Thakur et al., 2021, https://arxiv.org/abs/2104.08663;
  Pyserini's Lucene ``EnglishAnalyzer``). Without it a question about "prizes" misses a passage about the
  "prize", and "the"/"of" add score to every passage.
- ``standard``: the standard tokenizer and lower case, nothing removed or stemmed (Elasticsearch's default).

Elasticsearch runs its own built-in analyzer (the mapping fragments below name it); the in-memory store runs
:class:`TextAnalyzer`, a Python replica of it (PyStemmer's ``porter`` stemmer is the Porter algorithm Lucene's
``porter_stem`` implements; the stop list is Lucene's). ``tests/test_text_analysis.py`` checks the replica
against the node's ``_analyze`` API on real sample passages.

The title is searched as its own field, not glued to the text: BM25 scores it against titles (short, with
their own term statistics) and adds that to the content's score, as Elasticsearch's ``multi_match`` of type
``most_fields`` does (and Pyserini's multi-field BEIR indexes, title and contents with equal weights). Every
passage of an article carries the article's title, so a question naming the article's subject reaches its
passages even when the passage text does not repeat the name.

Usage:
    >>> from icr2_components.stores.text_analysis import TextAnalyzer, elasticsearch_bm25_query
    >>> TextAnalyzer("english")("Who won the Nobel Prizes in Physics?")
    ['who', 'won', 'nobel', 'prize', 'physic']
    >>> TextAnalyzer("standard")("Who won the Nobel Prizes in Physics?")
    ['who', 'won', 'the', 'nobel', 'prizes', 'in', 'physics']
    >>> elasticsearch_bm25_query("nobel prize")["multi_match"]["fields"]
    ['content', 'title.text']
"""

from __future__ import annotations

from typing import Any

import regex

from icr2_components.extras import require_extra
from icr2_components.stores.config import ConfigError

#: the analyzers a config may name (``store.analyzer``)
ANALYZERS = ("english", "standard")
DEFAULT_ANALYZER = "english"

#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``, Elasticsearch's ``_english_`` stop list
ENGLISH_STOP_WORDS = frozenset(
    [
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
        "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
        "will", "with",
    ]
)

#: the document field holding the passage text, and the meta field holding its title
CONTENT_FIELD = "content"
TITLE_FIELD = "title"
#: the analysed sub-field of the title in Elasticsearch (``title`` itself stays a keyword, for filters)
ELASTICSEARCH_TITLE_TEXT_FIELD = f"{TITLE_FIELD}.text"
#: the fields BM25 searches, whose scores are added (``multi_match`` type ``most_fields``)
ELASTICSEARCH_SEARCH_FIELDS = (CONTENT_FIELD, ELASTICSEARCH_TITLE_TEXT_FIELD)

# The standard tokenizer (Unicode UAX #29 word boundaries, as Lucene's StandardTokenizer applies them) for the
# text this project indexes: runs of letters, combining marks, digits, connectors (_) and format characters;
# an apostrophe, full stop, colon or middle dot between two letters (don't, U.S.A, o'neil) and a comma, full
# stop, semicolon or apostrophe between two digits (1,000 or 3.14) do not split; Han ideographs and hiragana are
# one token each, katakana runs one token; other symbols and punctuation separate tokens.
_WORD = r"[[\p{L}\p{M}\p{Nd}\p{Pc}\p{Cf}]--[\p{Han}\p{Hiragana}\p{Katakana}]]"
_WORD_START = (
    r"[[\p{L}\p{M}\p{Nd}\p{Pc}]--[\p{Han}\p{Hiragana}\p{Katakana}]]"  # a format character only extends a token
)
_LETTER = r"[\p{L}\p{M}]"
_TOKEN = regex.compile(
    rf"[\p{{Han}}\p{{Hiragana}}]|\p{{Katakana}}[\p{{Katakana}}\p{{M}}\u30fc]*"
    rf"|{_WORD_START}{_WORD}*(?:(?:(?<={_LETTER})[:.'\u2019\u00b7](?={_LETTER})|(?<=\p{{Nd}})[,.;'\u2019](?=\p{{Nd}})){_WORD}+)*",
    regex.V1,
)
_POSSESSIVE_APOSTROPHES = ("'", "\u2019", "\uff07")
# Lucene's standard tokenizer cuts tokens at 255 characters
_MAX_TOKEN_LENGTH = 255


def _is_consonant(word: str, i: int) -> bool:
    char = word[i]
    if char in "aeiou":
        return False
    if char == "y":
        return i == 0 or not _is_consonant(word, i - 1)
    return True


def _measure(word: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``word``."""
    m, previous_vowel = 0, False
    for i in range(len(word)):
        consonant = _is_consonant(word, i)
        if consonant and previous_vowel:
            m += 1
        previous_vowel = not consonant
    return m


def _ends_cvc(word: str) -> bool:
    n = len(word)
    return (
        n >= 3
        and _is_consonant(word, n - 3)
        and not _is_consonant(word, n - 2)
        and _is_consonant(word, n - 1)
        and word[-1] not in "wxy"
    )


def lucene_porter_stem(word: str, porter_stem) -> str:
    """Lucene's ``PorterStemmer`` (the C version Martin Porter published) from Snowball's original Porter
    algorithm (``porter_stem``, e.g. PyStemmer's): Lucene leaves words of one or two letters alone and departs
    from the original in step 2, ``bli`` -> ``ble`` for ``abli`` -> ``able`` and ``logi`` -> ``log`` added
    (assembly -> assembl, technology -> technolog). Neither rule can fire before step 2, and no later step of the
    original touches a word ending in ``bli`` or ``logi``, so the original's output still ends with them and the
    rest of the departure (steps 4 and 5 on the new ending) is applied here."""
    if len(word) <= 2:
        return word
    stem = porter_stem(word)
    if stem.endswith("logi") and _measure(stem[:-4]) > 0:
        return stem[:-1]
    if stem.endswith("bli") and not stem.endswith("abli") and _measure(stem[:-3]) > 0:
        stem = stem[:-1] + "e"
        if stem.endswith("ible") and _measure(stem[:-4]) > 1:
            stem = stem[:-4]
        if stem.endswith("e"):
            m = _measure(stem[:-1])
            if m > 1 or (m == 1 and not _ends_cvc(stem[:-1])):
                stem = stem[:-1]
        if stem.endswith("ll") and _measure(stem) > 1:
            stem = stem[:-1]
    return stem


class UnknownAnalyzerError(ConfigError):
    """The analyzer name is not one of :data:`ANALYZERS`; the message lists them."""


def validate_analyzer(name: Any, key: str = "store.analyzer") -> str:
    """``name`` when it is a known analyzer, else :class:`UnknownAnalyzerError` naming the config key."""
    if name not in ANALYZERS:
        raise UnknownAnalyzerError(
            f"{key} must be one of {', '.join(ANALYZERS)}, got {name!r} (english: stemming and stop words)."
        )
    return name


class TextAnalyzer:
    """The in-memory store's analyzer: text -> the tokens Elasticsearch's analyzer of the same name makes.

    :param name: ``english`` (possessives, lower case, stop words, Porter stemming) or ``standard`` (lower case).

    Usage:
        >>> analyze = TextAnalyzer("english")
        >>> analyze("Einstein's theories of relativity")
        ['einstein', 'theori', 'rel']
    """

    def __init__(self, name: str = DEFAULT_ANALYZER) -> None:
        self.name = validate_analyzer(name, key="analyzer")
        self._english = name == "english"
        self._stemmer = None
        if self._english:
            require_extra("index", "The 'english' analyzer", ("Stemmer",))
            import Stemmer  # PyStemmer: Snowball's C stemmers

            self._stemmer = Stemmer.Stemmer("porter")
        self._stems: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"TextAnalyzer({self.name!r})"

    def __call__(self, text: str) -> list[str]:
        tokens = [token[:_MAX_TOKEN_LENGTH] for token in _TOKEN.findall(text or "")]
        if not self._english:
            return [token.lower() for token in tokens]
        out = []
        stems = self._stems
        for token in tokens:
            if len(token) > 2 and token[-1] in "sS" and token[-2] in _POSSESSIVE_APOSTROPHES:
                token = token[:-2]
            token = token.lower()
            if token in ENGLISH_STOP_WORDS:
                continue
            stem = stems.get(token)
            if stem is None:
                stem = stems[token] = lucene_porter_stem(token, self._stemmer.stemWord)
            out.append(stem)
        return out

    def settings(self) -> dict[str, Any]:
        """What the tokens depend on (for a fingerprint)."""
        return {
            "analyzer": self.name,
            "stemmer": "porter" if self._english else None,
            "stop_words": len(ENGLISH_STOP_WORDS) if self._english else 0,
        }


# ------------------------------------------------------------------------------------------ Elasticsearch


def elasticsearch_text_properties(analyzer: str = DEFAULT_ANALYZER) -> dict[str, Any]:
    """Mapping properties of the searched fields: ``content`` analysed, ``title`` a keyword (filters match it
    exactly, as before) with an analysed ``title.text`` sub-field for BM25. The analyzers are the node's built-in
    ones, so the mapping needs no analysis settings."""
    validate_analyzer(analyzer)
    return {
        CONTENT_FIELD: {"type": "text", "analyzer": analyzer},
        TITLE_FIELD: {"type": "keyword", "fields": {"text": {"type": "text", "analyzer": analyzer}}},
    }


def with_text_analysis(mapping: dict[str, Any], analyzer: str = DEFAULT_ANALYZER) -> dict[str, Any]:
    """``mapping`` (an index's ``mappings`` body) with the searched fields of :func:`elasticsearch_text_properties`."""
    properties = {**mapping.get("properties", {}), **elasticsearch_text_properties(analyzer)}
    return {**mapping, "properties": properties}


def elasticsearch_bm25_query(query: str) -> dict[str, Any]:
    """The BM25 query: every term of ``query`` matched (OR) in the content and in the title, scores added; no
    fuzziness (plain BM25, as the in-memory store ranks it)."""
    return {
        "multi_match": {
            "query": query,
            "fields": list(ELASTICSEARCH_SEARCH_FIELDS),
            "type": "most_fields",
            "operator": "or",
        }
    }


def index_analyzer(client, index: str) -> str | None:
    """The analyzer of an existing index's ``content`` field (``standard`` when the mapping names none; None
    when the index has no ``content`` text field)."""
    mapping = client.indices.get_mapping(index=index).body
    properties = next(iter(mapping.values()))["mappings"].get("properties", {})
    content = properties.get(CONTENT_FIELD)
    if not content or content.get("type") != "text":
        return None
    return content.get("analyzer", "standard")


class AnalyzerUnavailableError(ValueError):
    """The Elasticsearch node has no analyzer of the configured name; the message says how to get it."""


def raise_if_analyzer_missing(error: BaseException, analyzer: str) -> None:
    """Turn the node's refusal of a mapping that names an analyzer it lacks into :class:`AnalyzerUnavailableError`
    (nothing happens for any other error)."""
    text = str(error) + " " + str(getattr(error, "info", "") or getattr(error, "body", ""))
    if f"analyzer [{analyzer}]" not in text:
        return
    raise AnalyzerUnavailableError(
        f"The Elasticsearch node has no '{analyzer}' analyzer (store.analyzer; it comes with the analysis-common "
        "module, "
        "which every full distribution has). A node started by scripts/elasticsearch.sh gets it from the "
        "icr2-analysis-english "
        "module: restart it (`bash scripts/elasticsearch.sh stop && bash scripts/elasticsearch.sh start`). Or set "
        "store.analyzer: standard."
    ) from error


def warn_on_other_analyzer(client, index: str, analyzer: str) -> None:
    """Log a warning when an existing index analyses its content with another analyzer than the config asks for
    (the analyzer is fixed when an index is created: re-index into a new index to change it)."""
    import logging

    current = index_analyzer(client, index)
    if current is not None and current != analyzer:
        logging.getLogger(__name__).warning(
            "Index '%s' already exists with the '%s' analyzer; store.analyzer: %s only applies to a newly created "
            "index "
            "(queries are analysed as the index was).",
            index,
            current,
            analyzer,
        )
