"""scriptorium: exactly-once, branch-aware long-term memory for agent conversations.

The library is the product; :mod:`scriptorium.cli` is a thin view of it.
"""

__version__ = "0.1.0"
