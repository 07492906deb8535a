"""scriptorium: exactly-once, branch-aware long-term memory for agent conversations.

The library is the product; :mod:`scriptorium.cli` is a thin view of it. The main entry
points are importable from here::

    from scriptorium import Memory, SessionStore, search
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# name -> module that defines it; imported on first use so `import scriptorium` stays light
_EXPORTS = {
    "Memory": "scriptorium.memory.writing",
    "SessionStore": "scriptorium.sessions",
    "Workspace": "scriptorium.memory.workspace",
    "search": "scriptorium.memory.search",
    "ScriptoriumError": "scriptorium.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'scriptorium' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
