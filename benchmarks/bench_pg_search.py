"""Search on a PostgreSQL home beside the directory home's SQLite FTS5 index, on the same topics.

For synthetic workspaces (the generator in topic_gen.py: topics citing archived turns), one
process indexes the same files both ways and reports, side by side:

- index build: the whole index from the files;
- warm query p50 / p95 (topic claims, top 5), nothing changed in between, the two indexes'
  queries interleaved so both see the same machine load; and the CPU time per warm query
  (PostgreSQL: this process plus the server's backends, read from /proc), which the load
  does not inflate the way it inflates a round trip's wall-clock time;
- the install hook's index update per write, and the first query after that write (a real
  transaction adds a paragraph to one topic; both indexes are attached to the workspace),
  also as a ratio to the same query run again right after;
- through ``Memory`` on whole homes (pg_home_search.py; alone with ``--only-homes``): the
  directory home beside the PostgreSQL home (and the PostgreSQL home of ``--baseline-rev``)
  on the single-process write, warm search and the first query after a write, as ratios,
  with the database round trips per query counted on the wire;
- top-5 agreement with the SQLite BM25 ranking, for each text search configuration and
  ranking asked for: the mean share of SQLite's top 5 that PostgreSQL's top 5 also holds,
  and the share of queries whose top 5 is identical in order; on the synthetic topics (no
  English words) and on English memory written by the embedded writer (bench_recall's
  conversations).

PostgreSQL: ``--pg URL`` (a server you run), else a throwaway durable server (fsync and
synchronous commit on) from tests/pgserver.py.
The database round trip is local (127.0.0.1). Machine load is printed with every row.

Usage:
    python benchmarks/bench_pg_search.py [--sizes 0.5,2] [--queries 20] [--writes 8]
        [--configs scriptorium_stem,english,simple] [--rankings bm25,ts_rank_cd]
        [--english-sessions 30] [--pg URL] [--quick] [--baseline-rev bd0982f]
        [--home-sessions 24] [--only-homes]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from topic_gen import vocabulary
from workspaces import REPO, copy_workspace, load

from scriptorium.memory.search import rebuild, search, update_index
from scriptorium.memory.search.pg_index import PgSearchIndex
from scriptorium.memory.search.pg_query import pg_search
from scriptorium.memory.search.pg_source import DirectorySource
from scriptorium.memory.workspace import Workspace
from scriptorium.postgres.connect import PgHome

TOP = 5


def ms(fn: Callable[..., Any], *args: Any, **kw: Any) -> float:
    t0 = time.perf_counter()
    fn(*args, **kw)
    return (time.perf_counter() - t0) * 1000


def fresh_home(url: str) -> str:
    """A home of its own in the server (runs sharing a server never share a home)."""
    return url + ("&" if "?" in url else "?") + f"home=bench_{uuid.uuid4().hex[:12]}"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def ident(hit: Any) -> tuple[str, int, int, str]:
    """A hit's identity (a block's claims share its line; two blocks may share a claim's
    words, so the text alone is not one either)."""
    return (hit.path, hit.line, hit.claim, hit.text)


def agreement(ws: Workspace, index: PgSearchIndex, queries: list[str],
              ranking: str) -> tuple[float, float]:
    """(mean top-5 overlap, share of identical top-5 orders) against the SQLite ranking."""
    overlap, same = [], 0
    for q in queries:
        ours = [ident(h) for h in pg_search(index, q, top_k=TOP, ranking=ranking)]
        theirs = [ident(h) for h in search(ws, q, top_k=TOP)]
        if theirs or ours:  # both finding nothing is agreement, not 0% overlap
            overlap.append(len(set(ours) & set(theirs)) / max(len(set(theirs)), 1))
        else:
            overlap.append(1.0)
        same += ours == theirs
    return statistics.mean(overlap), same / len(queries)


def one_size(url: str, mb: float, queries: list[str], writes: int, configs: list[str],
             rankings: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-pg-search-") as tmp:
        root = copy_workspace(mb, Path(tmp) / "memory")
        topics = sum(p.stat().st_size for p in (root / "topics").rglob("*.md"))
        ws = Workspace.open(root)
        with PgHome.open(fresh_home(url)) as pg:
            index = PgSearchIndex(pg, DirectorySource(ws))
            build_sqlite = ms(rebuild, ws, False)
            build_pg = ms(index.rebuild, False)
            for q in queries:  # every query once: prepared, cached, planned
                search(ws, q)
                pg_search(index, q)
            # interleaved, so both see the same machine load; CPU summed per side
            warm_sqlite, warm_pg, cpu = [], [], {"sqlite": 0.0, "client": 0.0, "server": 0.0}
            server = ServerCpu(pg)
            for i, q in enumerate(queries * 5):
                for side in (("sqlite", "pg") if i % 2 else ("pg", "sqlite")):
                    cpu0, server0 = time.process_time(), server.ms()
                    if side == "sqlite":
                        warm_sqlite.append(ms(search, ws, q))
                        cpu["sqlite"] += (time.process_time() - cpu0) * 1000
                    else:
                        warm_pg.append(ms(pg_search, index, q))
                        cpu["client"] += (time.process_time() - cpu0) * 1000
                        cpu["server"] += server.ms() - server0
            cpu_sqlite, cpu_client, cpu_server = (cpu[k] / len(warm_pg)
                                                  for k in ("sqlite", "client", "server"))
            hook_ms: dict[str, list[float]] = {"sqlite": [], "pg": []}

            def timed_hook(name: str, fn: Callable[[Any, Any], None]) -> Callable:
                def hook(w: Any, result: Any) -> None:
                    hook_ms[name].append(ms(fn, w, result))
                hook.__name__ = f"timed_{name}"
                return hook

            ws.add_install_hook(timed_hook("sqlite", update_index))
            ws.add_install_hook(timed_hook("pg", index.install_hook))
            after, again = _writes(ws, index, queries, writes)
            after_sqlite, after_pg = after
            cpu_pg = f"{cpu_client:.2f} + {cpu_server:.2f}" if cpu_server == cpu_server else \
                f"{cpu_client:.2f} + ?"
            print(f"| {topics / 1e6:.1f} MB | {index.count()} | "
                  f"{build_pg / 1000:.2f} / {build_sqlite / 1000:.2f} s "
                  f"({build_pg / build_sqlite:.1f}×) | "
                  f"{statistics.median(warm_pg):.2f} / {statistics.median(warm_sqlite):.2f} ms "
                  f"({statistics.median(warm_pg) / statistics.median(warm_sqlite):.1f}×) | "
                  f"{pct(warm_pg, .95):.2f} / {pct(warm_sqlite, .95):.2f} ms | "
                  f"{cpu_pg} / {cpu_sqlite:.2f} ms "
                  f"({(cpu_client + cpu_server) / cpu_sqlite:.1f}×) | "
                  f"{statistics.median(hook_ms['pg']):.1f} / "
                  f"{statistics.median(hook_ms['sqlite']):.1f} ms | "
                  f"{statistics.median(after_pg):.2f} / {statistics.median(after_sqlite):.2f} ms "
                  f"| {statistics.median(a / b for a, b in zip(after_pg, again[1])):.1f}× / "
                  f"{statistics.median(a / b for a, b in zip(after_sqlite, again[0])):.1f}× "
                  f"| {load()} |", flush=True)
            for config in configs:
                variant = PgSearchIndex(pg, DirectorySource(ws), config=config)
                variant.rebuild(False)
                for ranking in rankings:
                    mean, same = agreement(ws, variant, queries, ranking)
                    AGREEMENT.append(f"| {topics / 1e6:.1f} MB | {config} | {ranking} | "
                                     f"{mean:.1%} | {same:.1%} |")


AGREEMENT: list[str] = []


class ServerCpu:
    """CPU time the server's client backends spent since this was made (read from /proc:
    the server must run on this machine; NaN otherwise). The query path is timed this way
    too because wall-clock time on a loaded machine counts the waits for a core."""

    def __init__(self, pg: PgHome) -> None:
        with pg.connection() as conn:
            self.pids = [pid for (pid,) in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'")]
        self.start = self._total()

    def _total(self) -> float:
        total = 0.0
        for pid in self.pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return float("nan")
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def ms(self) -> float:
        return (self._total() - self.start) * 1000


def _writes(ws: Workspace, index: PgSearchIndex, queries: list[str],
            writes: int) -> tuple[tuple[list[float], list[float]],
                                  tuple[list[float], list[float]]]:
    """Add a paragraph to one topic per write (a real transaction), then time one query on
    each index, and the same query once more (warm), and check both find the new words.
    Returns (first after the write, again) times, each (SQLite, PG)."""
    root = Path(ws.root)
    files = sorted(p.relative_to(root).as_posix() for p in (root / "topics").rglob("*.md"))
    sid = "openprogram/s-0/n0"
    after_sqlite, after_pg, again_sqlite, again_pg = [], [], [], []
    for i in range(writes):
        rel = files[(i * 7919) % len(files)]
        with ws.begin(allowed_sources=[sid]) as tx:
            path = tx.stage / rel
            path.write_text(path.read_text() + f"\nA new paragraph marker{i}x.[^e1]\n\n"
                            f"[^e1]: Time: `2026-09-01`; Sources: [new]({sid})\n")
            assert tx.commit("bench: write").changed_files == [rel]
        q = queries[i % len(queries)]
        after_sqlite.append(ms(search, ws, q))
        after_pg.append(ms(pg_search, index, q))
        again_sqlite.append(ms(search, ws, q))
        again_pg.append(ms(pg_search, index, q))
        assert [h.path for h in search(ws, f"marker{i}x")] == [rel]
        assert [h.path for h in pg_search(index, f"marker{i}x")] == [rel]
    return (after_sqlite, after_pg), (again_sqlite, again_pg)


def english(url: str, sessions: int, configs: list[str], rankings: list[str]) -> None:
    """The same agreement on English memory: bench_recall's conversations (projects whose
    values are set and corrected) written by the embedded writer through the real write path,
    asked "<codename> <line>" and "what is the <line> of <codename> now?" (stop words, word
    forms: where the text search configurations differ)."""
    from bench_recall import EmbeddedWriter, build, generate

    convs = generate(sessions, 16)
    with tempfile.TemporaryDirectory(prefix="bench-pg-search-en-") as tmp:
        ws = build(Path(tmp), convs, EmbeddedWriter(), 400)["mem"].workspace
        queries = [q for conv in convs for line in conv.lines
                   for q in (f"{conv.codename} {line.attr}",
                             f"what is the {line.attr} of {conv.codename} now?")]
        with PgHome.open(fresh_home(url)) as pg:
            for config in configs:
                index = PgSearchIndex(pg, DirectorySource(ws), config=config)
                docs = index.rebuild(False)
                for ranking in rankings:
                    mean, same = agreement(ws, index, queries, ranking)
                    AGREEMENT.append(f"| English, {docs} claims, {len(queries)} queries | "
                                     f"{config} | {ranking} | {mean:.1%} | {same:.1%} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0.5,2", help="MB of topics, comma separated")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--writes", type=int, default=8)
    ap.add_argument("--configs", default="scriptorium_stem,english,simple")
    ap.add_argument("--rankings", default="bm25,ts_rank_cd")
    ap.add_argument("--english-sessions", type=int, default=30,
                    help="bench_recall conversations for the English agreement (0: skip)")
    ap.add_argument("--pg", help="a PostgreSQL server URL (default: start a throwaway one)")
    ap.add_argument("--baseline-rev", default="bd0982f",
                    help="the revision whose PostgreSQL home the Memory table compares ('': "
                    "none)")
    ap.add_argument("--home-sessions", type=int, default=24,
                    help="sessions (× 20 turns) of the Memory table on whole homes: write, "
                    "warm search, first query after a write (0: skip)")
    ap.add_argument("--only-homes", action="store_true",
                    help="only the Memory table: the directory home beside the PostgreSQL "
                    "home on the single-process write and search")
    ap.add_argument("--quick", action="store_true", help="only the default configuration and "
                    "BM25, no English agreement run (the speed table and its agreement)")
    args = ap.parse_args()
    if args.quick:
        args.configs, args.rankings, args.english_sessions = "scriptorium_stem", "bm25", 0
    server = None
    url = args.pg
    if url is None:
        sys.path.insert(0, str(REPO / "tests"))
        from pgserver import PgServer

        server = PgServer(durable=True)  # fsync and synchronous commit, as a real server
        url = server.start()
    try:
        print(f"python {sys.version.split()[0]}; load average at start {load()}; "
              "PostgreSQL on 127.0.0.1; ours = PostgreSQL home, baseline = directory home "
              "(SQLite FTS5)")
        if not args.only_homes:
            sizes(url, args)
        if args.home_sessions:
            from pg_home_search import homes_table

            homes_table(url, args.baseline_rev, args.home_sessions, 20, 5)
        print(f"\nload average at end {load()}")
    finally:
        if server is not None:
            server.stop()


def sizes(url: str, args: argparse.Namespace) -> None:
    """The index-level tables: per size, PostgreSQL beside SQLite; then the agreement."""
    print("\n| topics | documents | index build: PG / SQLite | warm query p50: PG / SQLite | "
          "warm p95: PG / SQLite | warm CPU per query: PG (client + server) / SQLite | "
          "index update per write (hook): PG / SQLite | first query after a write: PG / "
          "SQLite | first after a write ÷ the same query again: PG / SQLite | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mb in (float(x) for x in args.sizes.split(",")):
        rnd = random.Random(11)
        vocab = vocabulary(random.Random(7))
        queries = [" ".join(rnd.sample(vocab[20:1500], rnd.randint(1, 3)))
                   for _ in range(args.queries)]
        one_size(url, mb, queries, args.writes, args.configs.split(","),
                 args.rankings.split(","))
    if args.english_sessions:
        english(url, args.english_sessions, args.configs.split(","),
                args.rankings.split(","))
    print("\nTop-5 agreement with the SQLite BM25 ranking (same topics, same queries):\n")
    print("| topics | text search config | ranking | top-5 overlap | identical top 5 |")
    print("|---|---|---|---|---|")
    print("\n".join(AGREEMENT))


if __name__ == "__main__":
    main()
