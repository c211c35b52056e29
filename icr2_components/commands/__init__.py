"""Subcommands of ``icr2``: one module each, with ``register(subparsers)`` setting ``handler``."""
