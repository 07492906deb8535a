"""Building a writer by name, from the ``scriptorium.writers`` entry-point group.

A writer package registers a factory, a callable taking :class:`~scriptorium.config.Settings`
and returning a :class:`~.base.Writer`, in its own packaging metadata::

    [project.entry-points."scriptorium.writers"]
    mywriter = "mypackage.writer:make"

The built-in ``embedded`` and ``llm`` writers register themselves the same way in this
project's pyproject.toml, so ``--writer NAME`` and ``[writer] kind`` accept any installed name.
"""

from __future__ import annotations

from typing import Callable

from ...config import Settings
from ...entrypoints import check_writer_name
from ...errors import InvalidInput, ReasonCode
from .base import Writer

WriterFactory = Callable[[Settings], Writer]


def make_writer(name: str, settings: Settings | None = None) -> Writer:
    """The writer registered as ``name``, built from ``settings``."""
    entry = check_writer_name(name)
    try:
        factory = entry.load()
    except ImportError as exc:
        raise InvalidInput(f"the {name} writer is not available: {exc}",
                           code=ReasonCode.WRITER_PRECONDITION_FAILED) from None
    writer = factory(settings or Settings())
    missing = [attr for attr in ("name", "repair_attempts", "write") if not hasattr(writer, attr)]
    if missing:
        raise InvalidInput(f"the {name} writer ({entry.value}) is not a Writer: it lacks "
                           f"{', '.join(missing)}", code=ReasonCode.WRITER_PRECONDITION_FAILED)
    return writer  # type: ignore[no-any-return]
