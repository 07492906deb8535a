"""Names registered by installed packages through entry points (``importlib.metadata``).

Only names live here, so configuration can check a writer name without importing writers;
:mod:`scriptorium.memory.writers.registry` loads and builds the writer itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import InvalidInput, ReasonCode

if TYPE_CHECKING:  # pragma: no cover
    from importlib.metadata import EntryPoint

WRITERS_GROUP = "scriptorium.writers"

# Used only when this project's own metadata is not installed (running from a source tree
# without `pip install`); a test keeps it equal to pyproject.toml's entry points.
BUILTIN_WRITERS = {
    "embedded": "scriptorium.memory.writers.embedded:EmbeddedWriter.from_settings",
    "llm": "scriptorium.memory.writers.llm:LLMWriter.from_settings",
}


def registered_writers() -> dict[str, "EntryPoint"]:
    """Every writer name an installed package registers, with its entry point."""
    from importlib.metadata import EntryPoint, entry_points  # scans metadata: only on use

    found = {ep.name: ep for ep in entry_points(group=WRITERS_GROUP)}
    for name, value in BUILTIN_WRITERS.items():
        found.setdefault(name, EntryPoint(name, value, WRITERS_GROUP))
    return found


def check_writer_name(name: str) -> "EntryPoint":
    """The entry point of writer ``name``; a name nobody registered is refused in one line
    listing the ones that are."""
    known = registered_writers()
    if name not in known:
        raise InvalidInput(f"unknown writer {name!r} (registered: {', '.join(sorted(known))})",
                           code=ReasonCode.UNKNOWN_WRITER)
    return known[name]
