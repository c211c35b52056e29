"""Context-utilisation manipulation techniques (CUB) that are neither readers nor passage filters.

- PH3 head probing and its artifact (which heads to suppress; the suppression itself is in
  ``models.head_suppression`` and the reader that applies it in ``readers.head_suppression_reader``);
- multi-agent: the relevance judge's prompt and the answer prompt chosen from its verdict;
- prompting: named context-use instructions and the dev-split search over them.
"""
