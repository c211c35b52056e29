"""Placeholder until the Elasticsearch fixtures land (replaced by the real plugin)."""
