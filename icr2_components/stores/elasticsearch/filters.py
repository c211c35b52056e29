"""Haystack metadata filters as an Elasticsearch query, for the BM25 query this package sends itself.

Haystack's filter syntax (https://docs.haystack.deepset.ai/docs/metadata-filtering): a comparison
``{"field": "meta.year", "operator": ">=", "value": 2000}`` or a logical ``{"operator": "AND" | "OR" | "NOT",
"conditions": [...]}``. The index stores a document's meta flattened beside ``content`` and ``id`` (strings as
``keyword``), so ``meta.year`` is the field ``year``. The translation follows the one elasticsearch-haystack's
document store applies to its own retrievers, so the same filter selects the same documents through either.

Usage:
    >>> from icr2_components.stores.elasticsearch.filters import filters_to_query
    >>> filters_to_query({"operator": "AND", "conditions": [
    ...     {"field": "meta.title", "operator": "==", "value": "Paris"},
    ...     {"field": "meta.year", "operator": ">=", "value": 2000}]})
    {'bool': {'must': [{'term': {'title': 'Paris'}}, {'range': {'year': {'gte': 2000}}}]}}
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from haystack.errors import FilterError

LOGICAL_OPERATORS = ("AND", "OR", "NOT")
COMPARISON_OPERATORS = ("==", "!=", ">", ">=", "<", "<=", "in", "not in")
_RANGE = {">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}
# the analysed text field: "equal" means every term of the value is there (a term query never matches analysed text)
_TEXT_FIELDS = {"content"}
# what Haystack's stores answer to an order comparison with None: no document
_NOTHING = {"match_none": {}}


def filters_to_query(filters: dict[str, Any]) -> dict[str, Any]:
    """The Elasticsearch query (for a ``bool`` query's ``filter``) that keeps the documents ``filters`` keeps.

    :param filters: Haystack filters: one comparison or one logical condition, nested at will.
    :returns: An Elasticsearch query clause.
    :raises FilterError: A malformed filter; the message names the part and what it needs.
    """
    if not isinstance(filters, dict):
        raise FilterError(f"Filters must be a dictionary, got {type(filters).__name__}.")
    return _condition(filters)


def _condition(condition: Any) -> dict[str, Any]:
    if not isinstance(condition, dict):
        raise FilterError(f"A filter condition must be a dictionary, got {condition!r}.")
    if "field" in condition:
        return _comparison(condition)
    return _logical(condition)


def _logical(condition: dict[str, Any]) -> dict[str, Any]:
    operator, conditions = condition.get("operator"), condition.get("conditions")
    if operator not in LOGICAL_OPERATORS:
        raise FilterError(f"A logical filter needs 'operator' in {LOGICAL_OPERATORS} (or a comparison a 'field'), "
                          f"got {condition!r}.")
    if not isinstance(conditions, list) or not conditions:
        raise FilterError(f"A logical filter needs a non-empty 'conditions' list, got {condition!r}.")
    clauses = [_condition(c) for c in conditions]
    if operator == "AND":
        return {"bool": {"must": clauses}}
    if operator == "OR":
        return {"bool": {"should": clauses, "minimum_should_match": 1}}
    return {"bool": {"must_not": [{"bool": {"must": clauses}}]}}  # NOT: not all of them


def _comparison(condition: dict[str, Any]) -> dict[str, Any]:
    field, operator = condition["field"], condition.get("operator")
    if not isinstance(field, str) or not field:
        raise FilterError(f"A comparison's 'field' must be a non-empty string, got {condition!r}.")
    if operator not in COMPARISON_OPERATORS:
        raise FilterError(f"A comparison needs 'operator' in {COMPARISON_OPERATORS}, got {condition!r}.")
    if "value" not in condition:
        raise FilterError(f"A comparison needs a 'value', got {condition!r}.")
    value = condition["value"]
    field = field.removeprefix("meta.")  # meta is stored flattened
    if operator == "==":
        return _equal(field, value)
    if operator == "!=":
        return {"exists": {"field": field}} if value is None else {"bool": {"must_not": [_equal(field, value)]}}
    if operator in ("in", "not in"):
        if not isinstance(value, list):
            raise FilterError(f"'{operator}' needs a list value for {field!r}, got {value!r}.")
        terms = {"terms": {field: value}}
        return terms if operator == "in" else {"bool": {"must_not": [terms]}}
    if value is None:
        return _NOTHING
    if isinstance(value, list):
        raise FilterError(f"'{operator}' cannot compare {field!r} with a list ({value!r}).")
    if isinstance(value, str):
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise FilterError(f"'{operator}' compares numbers or ISO dates; {field!r} got the string {value!r}.") \
                from None
    return {"range": {field: {_RANGE[operator]: value}}}


def _equal(field: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {"bool": {"must_not": [{"exists": {"field": field}}]}}
    if isinstance(value, list):  # the field holds exactly these values (every one of them, and no other)
        return {"terms_set": {field: {"terms": value, "minimum_should_match_script": {
            "source": "Math.max(params.num_terms, doc[params.field].size())", "params": {"field": field}}}}}
    if field in _TEXT_FIELDS:
        return {"match": {field: {"query": value, "minimum_should_match": "100%"}}}
    return {"term": {field: value}}


__all__ = ["COMPARISON_OPERATORS", "LOGICAL_OPERATORS", "filters_to_query"]
