"""The papers' experiments as data: their inputs, conditions and scoring rules (``kv_retrieval``: Lost in the
Middle's synthetic key-value retrieval)."""
