"""Named crash points, so fault tests can kill a real process exactly between two steps.

``SCRIPTORIUM_FAULT=<step>`` makes the process stop at that step: ``SCRIPTORIUM_FAULT_ACTION=
kill`` (default) SIGKILLs itself, ``pause`` sleeps until killed; ``SCRIPTORIUM_FAULT_FLAG=<file>``
is written first so a test knows the process got there. In-process tests set ``HOOK`` to a
callable(step) instead (for example one raising to simulate a crash). Unset, a fault point costs
one environment lookup.

Steps: the write path's ``after-archive``, ``writer-ran``, ``before-mark``, ``mark-staged`` (the
batch's new node files written and durable, none renamed yet), ``mid-mark`` (the first one
renamed), ``mark-renamed`` (after every rename: a test kills at the N-th), ``after-mark``; the
transaction's install steps (see memory/transaction.py); ``git-init``, inside the first ``git
init`` of a session or workspace history (see gitrepo.py); ``home copy``'s
``home-copy-revision``, ``home-copy-session`` and ``home-copy-ledger`` (see home_copy.py).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable

HOOK: Callable[[str], None] | None = None


def fault_point(step: str) -> None:
    """Stop here if a test asked for it (see the module docstring)."""
    if HOOK is not None:
        HOOK(step)
    if os.environ.get("SCRIPTORIUM_FAULT") != step:
        return
    flag = os.environ.get("SCRIPTORIUM_FAULT_FLAG")
    if flag:
        Path(flag).write_text(step)
    if os.environ.get("SCRIPTORIUM_FAULT_ACTION", "kill") == "pause":
        while True:
            time.sleep(1)
    os.kill(os.getpid(), signal.SIGKILL)
