"""Progress messages that a bar can measure.

Long library runs report progress through a plain ``Callable[[str], None]``. The message is a
:class:`Step`: a ``str`` (so any callback that logs text keeps working) that also carries how
far along the run is, so a terminal front end can draw a real bar instead of a spinner.
"""

from __future__ import annotations

from typing import Callable


class Step(str):
    """A progress message with ``done`` of ``total`` units (total may grow, never shrinks)."""

    done: int
    total: int

    def __new__(cls, text: str, done: int, total: int) -> "Step":
        step = super().__new__(cls, text)
        step.done, step.total = done, total
        return step


# What long runs report progress through: plain text, or a Step that also measures.
Progress = Callable[[str], None]
