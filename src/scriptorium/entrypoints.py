"""Names registered by installed packages through entry points (``importlib.metadata``).

Only names live here, so configuration can check a writer name without importing writers;
:mod:`scriptorium.memory.writers.registry` loads and builds the writer itself.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, NamedTuple

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
    for name, value in BUILTIN_WRITERS.items():  # ours, even where another package reuses it
        found[name] = EntryPoint(name, value, WRITERS_GROUP)
    return found


class BuiltinWriter(NamedTuple):
    """A built-in writer's entry point, loaded as :class:`importlib.metadata.EntryPoint`
    loads one (``module:attr.attr``), without importing ``importlib.metadata``."""

    name: str
    value: str

    def load(self) -> Any:
        module, _, attrs = self.value.partition(":")
        found: Any = importlib.import_module(module)
        for attr in attrs.split("."):
            found = getattr(found, attr)
        return found


def check_writer_name(name: str) -> "EntryPoint | BuiltinWriter":
    """The entry point of writer ``name``; a name nobody registered is refused in one line
    listing the ones that are.

    A built-in name is ours whatever else is installed, and is answered without scanning
    the installed packages' metadata: the scan imports ``importlib.metadata`` and the
    modules it needs (34 of them) and reads every installed distribution, 10 ms and
    1.8 MB at every start of a process that writes memory."""
    if name in BUILTIN_WRITERS:
        return BuiltinWriter(name, BUILTIN_WRITERS[name])
    known = registered_writers()
    if name not in known:
        raise InvalidInput(f"unknown writer {name!r} (registered: {', '.join(sorted(known))})",
                           code=ReasonCode.UNKNOWN_WRITER)
    return known[name]
