"""Cached archive lookups vs re-reading the file on every lookup (the naive baseline).

A write path validates every citation of a transaction with lookup/resolve_target; this shows
what the (path, mtime_ns, size, inode) parse cache buys. Usage:
    python benchmarks/sources_lookup.py [--files 40] [--frames 50] [--lookups 4000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from scriptorium.memory.sources import SourceArchive, SourceRecord, parse_v2, read_text, v2_path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--frames", type=int, default=50)
    ap.add_argument("--lookups", type=int, default=4000)
    args = ap.parse_args()
    rnd = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        arch = SourceArchive(root)
        records = [SourceRecord("openprogram", f"s-{t}", f"n{m}", "user",
                                f"turn {m} of session {t}: " + "words " * rnd.randint(5, 200),
                                timestamp="2026-08-09T20:15:06+08:00")
                   for t in range(args.files) for m in range(args.frames)]
        t0 = time.perf_counter()
        arch.archive(records)
        write_s = time.perf_counter() - t0
        ids = [r.source_id for r in records]
        queries = [rnd.choice(ids) for _ in range(args.lookups)]

        t0 = time.perf_counter()
        for sid in queries:
            path = v2_path(sid)
            parsed = parse_v2(read_text((root / path).read_bytes()), path)
            assert any(f.source_id == sid for f in parsed.frames)
        naive = time.perf_counter() - t0

        cached_arch = SourceArchive(root)
        t0 = time.perf_counter()
        for sid in queries:
            assert cached_arch.lookup(sid) is not None
        cached = time.perf_counter() - t0

    print(f"archive: {args.files} files x {args.frames} frames written in {write_s * 1000:.0f} ms")
    print(f"{args.lookups} lookups   naive re-parse: {naive * 1000:8.1f} ms   "
          f"cached: {cached * 1000:8.1f} ms   ratio naive/cached: {naive / cached:5.1f}x")


if __name__ == "__main__":
    main()
