"""Subcommands of the ``hf-dr`` CLI; each module exposes ``register(subparsers)``."""
