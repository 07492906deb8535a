"""A real process writing memory on a PostgreSQL home, for the crash tests to SIGKILL:
``python pg_memory_worker.py URL DIR [--audit FILE]``.

It runs the session-boundary write over every session (``SCRIPTORIUM_FAULT`` picks the step
where it kills itself, see scriptorium.faults) and prints the results as JSON. Every batch
handed to the writer is appended to ``--audit`` first (fsynced), so the parent can count how
often each turn reached a writer. Sessions live where pgmemkit.Homes puts them (``DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pgmemkit import Homes  # noqa: E402
from scriptorium.memory.writers.embedded import EmbeddedWriter  # noqa: E402


class AuditedWriter(EmbeddedWriter):
    """The embedded writer, logging each batch it is handed before it writes."""

    def __init__(self, audit: str | None) -> None:
        self.audit = audit

    def write(self, request):  # type: ignore[no-untyped-def]
        if self.audit:
            fd = os.open(self.audit, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                line = json.dumps([r.source_id for r in request.batch]) + "\n"
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        return super().write(request)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("dir")
    parser.add_argument("--audit")
    parser.add_argument("--trigger-tokens", type=int, default=40)
    args = parser.parse_args()
    homes = Homes("postgres", Path(args.dir), args.url)
    mem = homes.open(AuditedWriter(args.audit), trigger_tokens=args.trigger_tokens)
    results = mem.write(force=True)
    print(json.dumps([r.to_dict() for r in results]))
    homes.close()
    sys.exit(1 if any(r.failure for r in results) else 0)


if __name__ == "__main__":
    main()
