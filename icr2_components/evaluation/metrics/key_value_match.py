"""Key-value retrieval accuracy, Lost in the Middle's rule (its section 4.1): a reply is correct when the asked
pair's value appears in it.

The paper's code lower-cases both sides and tests containment: a reply that repeats the value inside a sentence, in
quotes or in another case counts; a value cut short, a neighbouring pair's value or the key itself does not.
"""

from __future__ import annotations


def key_value_match(reply: str, value: str) -> bool:
    """Whether ``value`` appears in ``reply`` (both lower-cased): Lost in the Middle's key-value accuracy.

    ``key_value_match('The value is "703A7CE5-F17F-4E6D-B895-5836BA5EC71C".', "703a7ce5-f17f-4e6d-b895-5836ba5ec71c")
    -> True``.

    :raises ValueError: for an empty value (every reply would contain it).
    """
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"the value to find must be a non-empty string, got {value!r}.")
    return value.strip().lower() in str(reply).lower()
