"""Memory workers on one PostgreSQL home (`memory work`), side by side, with the machine load.

1. The queue alone: 1, 2 and 4 worker processes draining one job per session (the sessions'
   head moves fed through the trigger), with a probe job (tests/postgres/work_proc.py), so
   the figure is the claim / record / notify cost, no memory write: jobs/s between the first
   and the last job recorded (process start-up excluded; the wall time includes it), the
   ratio to one worker, duplicates (a job body completed twice) and omissions (a session never done);
   then the same with a worker SIGKILLed every few seconds (and replaced). Also the feed's
   cost per head move (the trigger) against the same inserts without it.
2. The memory write: 1, 2 and 4 worker processes (`memory work --drain`'s library call,
   through tests/postgres/work_proc.py --memory) writing SESSIONS x TURNS with the embedded
   writer on a PostgreSQL home — turns/s between the first and the last job done (start-up
   excluded; the wall time includes it), ratio, duplicates (a turn handed to the writer
   twice; citations beyond those of the one-worker run on the same sessions) and omissions
   (a turn still pending), and the same under SIGKILLs; per run also the CPU seconds per
   turn of the workers (start-up included) and of the PostgreSQL server's processes, the
   installs redone because another worker's install moved a topic (CONCURRENT_UPDATE), and
   the load average, and the publishing share (the time each worker spends in publishing
   transactions, which queue on the home's generation row: no other writer overlaps it).
   Beside each ratio, the ratio the machine's cores leave room for at that run's cost:
   cores / (CPU per turn, workers + server) / one worker's turns/s (one worker and its
   server already use about one core each turn, so 2 cores cannot give 4 workers 2.5x).
   Every session has a subject (a topic) of its own, as different conversations do; then
   1 and 4 workers again with every session on one of --shared-topics subjects, so all
   workers write the same topics and installs collide.
   After the table, each worker process's jobs, turns and own CPU per turn (start-up
   excluded; a killed worker cannot say), where one worker's wall time goes (its own CPU,
   the server's CPU, neither: round trips and scheduling), the ceiling that leaves on this
   machine's cores (N workers reach at most cores x wall / (CPU per turn) times one
   worker, and at most 1 / publishing share (Amdahl), whatever N), and the CPU per turn at
   N workers beside one worker's, in total and the workers' own (what should not grow
   with N). --profile DIR writes each
   memory worker's cProfile stats (CPU time) under DIR/<code>-<N>w[-kill]/.
   With --baseline-rev REV the same runs are made with that revision's code (exported from
   this repository, or --baseline-src DIR), interleaved with ours, and a table puts the two
   side by side.
3. One process writing every session (`Memory.write(force=True)`): directory home vs
   PostgreSQL home (the latter as 2).

Run:  python benchmarks/bench_pg_workers.py [--sessions 1000] [--turns 50] [--quick]
      [--queue-sessions N] [--kill-every S (0: no SIGKILL run)] [--workers 1,2,4]
      [--profile DIR] [--only queue|memory|single]
      [--baseline-rev REV [--baseline-src DIR]]
      [--shared-topics K (default 4; 0 skips)] [--shared-sessions N (default <= 100)]
      [--url postgresql://...]   (default: $SCRIPTORIUM_TEST_PG, else a throwaway server)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "postgres")]

from pgserver import ENV, PgServer, home_url  # noqa: E402
from scriptorium.postgres.connect import PgHome  # noqa: E402
from scriptorium.postgres.jobs import queue_status  # noqa: E402
from workkit import PROC, open_home, probe  # noqa: E402
from worker_procs import (CpuMeter, RawHome, baseline_src, env, load,  # noqa: E402
                          run_workers)

WORKERS = (1, 2, 4)
PROFILE: Path | None = None  # --profile: each memory worker's cProfile stats go under here


# -- 1. the queue alone ----------------------------------------------------------------------

def seed_moves(pg: PgHome, sessions: int, turns: int, table: str = "head_moves") -> float:
    """``turns`` head moves per session (an append each), in one transaction; seconds."""
    start = time.perf_counter()
    with pg.connection() as conn:
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} (session_id, old_head, new_head, at)"
                            " VALUES (%s, %s, %s, 0)",
                            [(f"s{s:05d}", f"t{t - 1}" if t else None, f"t{t}")
                             for s in range(sessions) for t in range(turns)])
    return time.perf_counter() - start


def queue_section(base: str, sessions: int, turns: int, kill_every: float) -> list[dict]:
    rows = []
    for count, kill in [(k, None) for k in WORKERS] + ([(4, kill_every)] if kill_every else []):
        url = home_url(base, "bq")
        pg = open_home(url)
        seed = seed_moves(pg, sessions, turns)
        if count == 1 and kill is None:
            with pg.connection() as conn:
                conn.execute("CREATE TABLE moves_plain (LIKE head_moves INCLUDING DEFAULTS)")
            plain = seed_moves(pg, sessions, turns, "moves_plain")
            moves = sessions * turns
            rows.append({"what": f"feed: {moves} head moves, trigger vs none",
                         "ours_ms": seed * 1000, "base_ms": plain * 1000,
                         "note": f"{seed / moves * 1e6:.0f} µs/move with the trigger, "
                                 f"{plain / moves * 1e6:.0f} µs without"})

        def owing() -> int:
            with pg.connection() as conn:
                return queue_status(conn)["owing"]

        def spawn(i: int, out: Any) -> subprocess.Popen:
            return subprocess.Popen([sys.executable, str(PROC), url, "--name", f"w{i}",
                                     "--drain", "--until-idle", "--interval", "2"],
                                    stdout=out, stderr=subprocess.DEVNULL, env=env())

        run = run_workers(spawn, count, kill, owing)
        events = probe(pg)
        done = Counter(sid for sid, _seq, _w, ev in events if ev == "done")
        overlaps = sum(1 for *_, ev in events if ev == "overlap")  # one job run twice at once
        with pg.connection() as conn:  # first to last job recorded, on the database's clock
            window = conn.execute("SELECT max(done_at) - min(done_at) FROM work_claims"
                                  ).fetchone()[0] or run["wall"]
        rows.append({"what": f"queue, {count} worker(s)" + (
                     f", SIGKILL every {kill:g} s ({run['kills']} kills)" if kill else ""),
                     "workers": count, "jobs_s": (sessions - 1) / window,
                     "wall_s": run["wall"],
                     "duplicates": f"{overlaps} / {sum(n - 1 for n in done.values() if n > 1)}",
                     "omissions": sessions - len(done) + owing(), "killed": bool(kill)})
        pg.close()
    one = next(r for r in rows if r.get("workers") == 1)
    for r in rows:
        if "jobs_s" in r:
            r["ratio"] = r["jobs_s"] / one["jobs_s"]
    return rows


# -- 2 and 3. the memory write ----------------------------------------------------------------

# each session talks about its own subject (a word, numbered past the list), so writers of
# different sessions mostly write different topics, as different conversations do
SUBJECTS = ["harbour", "ledger", "kiln", "orchard", "beacon", "quarry", "lantern", "meadow",
            "anvil", "compass", "glacier", "thicket", "foundry", "estuary", "parapet", "sextant"]
TEXTS = ["The {w} review for team {n} moved to day {k}.",
         "Budget for the {w} work of team {n} is {k} thousand euros.",
         "Team {n} agreed the {w} owner reports on day {k}."]


def seed_sessions(store: Any, sessions: int, turns: int, shared: int = 0) -> int:
    """SESSIONS linear sessions of TURNS turns through the store's bulk appender (what an
    importer uses); the number of turns. Each session has a subject of its own (its own
    topic, as different conversations have), or with ``shared`` one of that many titles, so
    every worker writes the same few topics (installs then collide and are redone)."""
    from scriptorium.sessions.node import Node

    for s in range(sessions):
        sid = f"s{s:05d}"
        subject = SUBJECTS[s % len(SUBJECTS)] + ("" if s < len(SUBJECTS) else str(s))
        if shared:
            store.create_session(sid, title=f"{SUBJECTS[s % shared].capitalize()} plans")
        else:
            store.create_session(sid)
        with store.bulk(sid) as bulk:
            prev = None
            for t in range(turns):
                node = Node(id=f"{sid}-{t}", created_at=1_700_000_000.0 + t,
                            role="user" if t % 2 == 0 else "llm", predecessor=prev,
                            output=TEXTS[t % 3].format(w=subject, n=s, k=t))
                bulk.append(node)
                prev = node.id
            bulk.set_head(prev)
    return sessions * turns


def owed(mem: Any) -> int:
    """Turns still pending on any live branch of any session."""
    return sum(len(mem.pending(row["session_id"], tip)) for row in mem.store.list_sessions()
               for tip in mem.live_tips(row["session_id"]))


def pg_memory(url: str) -> tuple[Any, str]:
    """``Memory.open(url)`` if this build has the PostgreSQL memory home, else (None, why)."""
    import importlib.util

    from scriptorium.memory.writing import Memory

    if importlib.util.find_spec("scriptorium.memory.pg_workspace") is None:
        return None, ("this build has no PostgreSQL memory workspace "
                      "(scriptorium.memory.pg_workspace, branch pg-memory)")
    try:
        return Memory.open(url), ""
    except Exception as exc:  # report what failed, never a guessed figure
        return None, f"{type(exc).__name__}: {exc}"


def seed_home(url: str, sessions: int, turns: int, shared: int, src: Path) -> None:
    """Seed a fresh home with the code in ``src`` (its schema is the one its workers know)."""
    subprocess.run([sys.executable, __file__, "--seed", url, str(sessions), str(turns),
                    str(shared)], check=True, env=env(src))


def memory_section(base: str, sessions: int, turns: int, kill_every: float, *,
                   shared: int = 0, counts: tuple[int, ...] = WORKERS, kill: bool = True,
                   srcs: dict[str, Path] | None = None) -> dict[str, list[dict]]:
    """Rows per code under test (``srcs``: name -> its ``src/``; default ours), the runs of
    each interleaved with the others'. Each run is a fresh home seeded and written by that
    code; the checks after it (omissions, citations) are ours."""
    srcs = srcs or {"ours": ROOT / "src"}
    out: dict[str, list[dict]] = {name: [] for name in srcs}
    clean: dict[str, Counter] = {name: Counter() for name in srcs}
    runs = [(k, None) for k in counts] + ([(4, kill_every)] if kill else [])
    for count, kill_s in runs:
        for name, src in srcs.items():
            row = memory_run(base, sessions, turns, count, kill_s, shared, src, clean[name])
            out[name].append(row)
    for rows in out.values():
        one = next((r for r in rows if r.get("workers") == 1 and "turns_s" in r), None)
        for r in rows:
            if one is not None and "turns_s" in r:
                r["ratio"] = r["turns_s"] / one["turns_s"]
    return out


def memory_run(base: str, sessions: int, turns: int, count: int, kill_s: float | None,
               shared: int, src: Path, clean: Counter) -> dict:
    """One run: ``count`` workers (with a killer when ``kill_s``) of the code in ``src``.
    ``clean``: the citations of that code's first run, the reference for duplicates (filled
    by the first run)."""
    from scriptorium.memory.citations import citation_map

    url = home_url(base, "bm")
    label = f"{count} worker(s)" + (f", SIGKILL every {kill_s:g} s" if kill_s else "")
    try:
        seed_home(url, sessions, turns, shared, src)
    except subprocess.CalledProcessError as exc:
        return {"what": label, "missing": str(exc)}
    pg = RawHome(url)
    meter = CpuMeter(pg)

    profile: list[str] = []
    if PROFILE is not None:  # one directory per run: <code>-<workers>w[-kill]
        where = PROFILE / f"{src.parent.name}-{count}w{'-kill' if kill_s else ''}"
        where.mkdir(parents=True, exist_ok=True)
        profile = ["--profile", str(where)]

    def spawn(i: int, out: Any) -> subprocess.Popen:  # what `memory work --drain` runs
        return subprocess.Popen([sys.executable, str(PROC), url, "--name", f"m{i}",
                                 "--memory", "--drain", "--until-idle", "--interval", "2",
                                 *profile], stdout=out, stderr=subprocess.DEVNULL, env=env(src))

    def pending_jobs() -> int:
        with pg.connection() as conn:
            return queue_status(conn)["owing"]

    cpu_before = meter.read()
    run = run_workers(spawn, count, kill_s, pending_jobs)
    cpu_after = meter.read()
    mem, why = pg_memory(url)
    if mem is None:
        return {"what": label, "missing": why}
    per_worker = [worker_figures(out) for out in run["outputs"]]
    events = [json.loads(line) for out in run["outputs"] for line in out.splitlines()
              if line.startswith("{")]
    jobs = [e for e in events if e.get("event") == "job"]
    startup = sum(e.get("cpu", 0.0) for e in events if e.get("event") == "ready")
    marked = Counter(node for job in jobs for node in job.get("marked", []))
    failures = Counter(job["failure"]["reason_code"] for job in jobs if job.get("failure"))
    cited = Counter({src_id: len(blocks) for src_id, blocks in
                     citation_map(mem.workspace).items()})
    if not clean:  # the first run (one worker, no kills) is the reference
        clean.update(cited)
    with pg.connection() as conn:  # first to last job, database clock
        window = conn.execute("SELECT max(done_at) - min(done_at) FROM work_claims"
                              ).fetchone()[0] or run["wall"]
    total = sessions * turns
    server = None if cpu_after[1] is None or cpu_before[1] is None \
        else cpu_after[1] - cpu_before[1]
    publish = [job["publish_s"] for job in jobs if "publish_s" in job]
    row = {"what": label + (f" ({run['kills']} kills)" if kill_s else ""),
                 "workers": count, "turns_s": (sessions - 1) * turns / window,
                 "wall_s": run["wall"],
                 "cpu_ms": (cpu_after[0] - cpu_before[0] - startup) / total * 1000,
                 "startup_s": startup,
                 "server_ms": None if server is None else server / total * 1000,
                 # the share of each worker's time spent publishing (queued on the
                 # home's generation row: what no other writer overlaps)
                 "serial": sum(publish) / (count * window) if publish else None,
                 "redos": sum(job.get("redos", 0) for job in jobs),
                 "retried": ", ".join(f"{n} {code}" for code, n in failures.items()),
                 "load": load(),
                 "duplicates": f"{sum(n - 1 for n in marked.values() if n > 1)} / "
                               f"{sum((cited - clean).values())}",
                 "omissions": owed(mem), "killed": bool(kill_s), "per_worker": per_worker}
    mem.close()
    return row


def worker_figures(out: str) -> dict[str, Any]:
    """One worker process's jobs, turns written and CPU after start-up (None: it was
    killed before it could say)."""
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    jobs = [e for e in events if e.get("event") == "job"]
    ready = next((e["cpu"] for e in events if e.get("event") == "ready"), None)
    end = next((e.get("cpu") for e in events if e.get("event") == "summary"), None)
    return {"jobs": len(jobs), "turns": sum(len(j.get("marked", [])) for j in jobs),
            "cpu_s": None if ready is None or end is None else end - ready}


def show_workers(rows: list[dict]) -> None:
    """Each run's workers: jobs, turns, and CPU per turn after start-up (a worker's own
    cost, which should not grow with the number of workers)."""
    print("\nPer worker (jobs / turns / own CPU ms per turn after start-up; killed: n/a):")
    for r in rows:
        parts = []
        for i, w in enumerate(r.get("per_worker", [])):
            cpu = "n/a" if w["cpu_s"] is None or not w["turns"] else \
                f"{w['cpu_s'] / w['turns'] * 1000:.2f}"
            parts.append(f"w{i} {w['jobs']}/{w['turns']}/{cpu}")
        if parts:
            print(f"- {r['what']}: " + ", ".join(parts))


def ceiling(r: dict, one: dict | None, cores: int) -> str:
    """The ratio to one worker that ``cores`` leave room for at this run's CPU per turn:
    cores / (CPU per turn, workers + server) / one worker's turns/s."""
    if one is None or r.get("server_ms") is None:
        return "n/a"
    return f"{cores / ((r['cpu_ms'] + r['server_ms']) / 1000) / one['turns_s']:.2f}x"


def show_memory(title: str, rows: list[dict], cores: int) -> None:
    """The memory-work table: rate, ratio beside the ceiling the cores leave, CPU per turn,
    redos, load, the two checks."""
    one = next((r for r in rows if r.get("workers") == 1 and "turns_s" in r), None)
    print(f"\n## {title}\n")
    print(f"| workers | turns/s | ratio to 1 | {cores}-core ceiling = {cores} / (CPU per turn "
          "x 1 worker's turns/s) | wall s | CPU ms/turn: workers (start-up "
          "excluded) + server = total | publishing share "
          "| install redos (CONCURRENT_UPDATE) / jobs retried | load 1/5/15 "
          "| turns handed to the writer twice / citations beyond the 1-worker run "
          "| omissions |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "missing" in r:
            print(f"| {r['what']} | not measurable yet: {r['missing']} | | | | | | | | | |")
            continue
        cpu = f"{r['cpu_ms']:.2f} + " + ("n/a" if r["server_ms"] is None else
                                         f"{r['server_ms']:.2f} = "
                                         f"{r['cpu_ms'] + r['server_ms']:.2f}")
        serial = "n/a" if r.get("serial") is None else f"{r['serial'] * 100:.0f} %"
        print(f"| {r['what']} | {r['turns_s']:.1f} | {r['ratio']:.2f}x "
              f"| {ceiling(r, one, cores)} | {r['wall_s']:.1f} "
              f"| {cpu} | {serial} | {r['redos']} / {r['retried'] or 0} | {r['load']} "
              f"| {r['duplicates']} | {r['omissions']} |")


def show_breakdown(rows: list[dict], cores: int) -> None:
    """Where one worker's wall time goes, and the ratio that leaves room for on ``cores``."""
    one = next((r for r in rows if r.get("workers") == 1 and "turns_s" in r), None)
    if one is None or one["server_ms"] is None:
        return
    wall = 1000 / one["turns_s"]
    busy = one["cpu_ms"] + one["server_ms"]
    cpu_cap = cores * wall / busy
    print(f"\nOne worker, per turn: {wall:.2f} ms wall = {one['cpu_ms']:.2f} ms its own CPU"
          f" + {one['server_ms']:.2f} ms the server's CPU + {max(0.0, wall - busy):.2f} ms "
          f"neither (round trips, scheduling: {max(0.0, wall - busy) / wall * 100:.0f} %). "
          f"{cores} cores give at most {cores} / {busy:.2f} ms of CPU per turn = "
          f"{cpu_cap:.2f}x one worker, if a worker's CPU per turn did not grow with more "
          "workers", end="")
    if one.get("serial"):
        print(f"; publishing ({one['serial'] * 100:.0f} % of its time) caps any number "
              f"of workers at {1 / one['serial']:.1f}x (Amdahl)", end="")
    print(". Measured CPU per turn at N workers (÷ one worker's): " + ", ".join(
        f"{r['workers']}{' with kills' if r['killed'] else ''}: "
        f"{r['cpu_ms'] + r['server_ms']:.2f} ms "
        f"({(r['cpu_ms'] + r['server_ms']) / busy:.2f}x)" for r in rows
        if "turns_s" in r and r["server_ms"] is not None) + "; the workers' own CPU per "
          "turn alone: " + ", ".join(
        f"{r['workers']}{' with kills' if r['killed'] else ''}: {r['cpu_ms']:.2f} ms "
        f"({r['cpu_ms'] / one['cpu_ms']:.2f}x)" for r in rows if "turns_s" in r) + ".")


def show_versus(rows: list[dict], base: list[dict], rev: str) -> None:
    print(f"\n## ours beside {rev} (same sizes, same server, runs interleaved)\n")
    print(f"| run | ours turns/s | {rev} turns/s | ours / {rev} | ratio to 1 worker: ours / "
          f"{rev} | CPU ms/turn (workers + server): ours / {rev} |")
    print("|---|---|---|---|---|---|")
    for ours, theirs in zip(rows, base):
        if "turns_s" not in ours or "turns_s" not in theirs:
            continue
        cpu = [r["cpu_ms"] + (r["server_ms"] or 0.0) for r in (ours, theirs)]
        print(f"| {ours['what']} | {ours['turns_s']:.0f} | {theirs['turns_s']:.0f} "
              f"| {ours['turns_s'] / theirs['turns_s']:.2f}x | {ours['ratio']:.2f}x / "
              f"{theirs['ratio']:.2f}x | {cpu[0]:.2f} / {cpu[1]:.2f} |")


def single_section(base: str, sessions: int, turns: int) -> list[dict]:
    from scriptorium.config import load_settings
    from scriptorium.memory.writing import Memory
    from scriptorium.sessions import SessionStore

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        total = seed_sessions(SessionStore(home / "sessions"), sessions, turns)
        mem = Memory(home, settings=load_settings(home))
        start = time.perf_counter()
        results = mem.write(force=True)
        wall = time.perf_counter() - start
        assert not [r for r in results if r.failure], "a directory write failed"
        rows.append({"what": "one process, directory home", "turns_s": total / wall,
                     "wall_s": wall, "omissions": owed(mem)})
    mem, why = pg_memory(home_url(base, "bs"))
    if mem is None:
        rows.append({"what": "one process, PostgreSQL home", "missing": why})
        return rows
    total = seed_sessions(mem.store, sessions, turns)
    start = time.perf_counter()
    mem.write(force=True)
    wall = time.perf_counter() - start
    rows.append({"what": "one process, PostgreSQL home", "turns_s": total / wall,
                 "wall_s": wall, "omissions": owed(mem)})
    mem.close()
    rows[-1]["ratio"] = rows[-1]["turns_s"] / rows[0]["turns_s"]
    return rows


# -- the report ------------------------------------------------------------------------------

def show(title: str, rows: list[dict], rate: str, twice: str = "duplicates") -> None:
    print(f"\n## {title}\n")
    print(f"| what | {rate} | ratio to 1 | wall s | {twice} | omissions |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "missing" in r:
            print(f"| {r['what']} | not measurable yet: {r['missing']} | | | | |")
        elif "ours_ms" in r:
            print(f"| {r['what']} | {r['note']} | {r['ours_ms'] / r['base_ms']:.2f}x the "
                  f"plain insert | {r['ours_ms'] / 1000:.2f} | | |")
        else:
            ratio = f"{r['ratio']:.2f}x" if "ratio" in r else ""
            print(f"| {r['what']} | {r[rate]:.1f} | {ratio} | {r['wall_s']:.2f} | "
                  f"{r.get('duplicates', '')} | {r['omissions']} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--queue-sessions", type=int, default=None,
                    help="sessions for the queue-alone section (default: --sessions)")
    ap.add_argument("--turns", type=int, default=50)
    ap.add_argument("--kill-every", type=float, default=None,
                    help="seconds between SIGKILLs (default 3, --quick 0.5)")
    ap.add_argument("--quick", action="store_true", help="100 sessions x 10 turns")
    ap.add_argument("--url", default=os.environ.get(ENV))
    ap.add_argument("--only", choices=["queue", "memory", "single"], default=None)
    ap.add_argument("--shared-topics", type=int, default=4,
                    help="also run 1 and 4 workers with every session on one of this many "
                         "subjects (0: skip)")
    ap.add_argument("--shared-sessions", type=int, default=None,
                    help="sessions for the shared-subject runs (default: --sessions, at most "
                         "100: each install rewrites a topic that grows with every session)")
    ap.add_argument("--baseline-rev", default=None,
                    help="also run the memory section with this revision's code, interleaved")
    ap.add_argument("--baseline-src", default=None,
                    help="the baseline's src/ directory, already checked out (instead of "
                         "exporting --baseline-rev from this repository)")
    ap.add_argument("--workers", default="1,2,4",
                    help="the worker counts of the memory section (the SIGKILL run uses 4)")
    ap.add_argument("--profile", default=None, type=Path,
                    help="write each memory worker's cProfile stats under this directory")
    ap.add_argument("--seed", nargs=4, metavar=("URL", "SESSIONS", "TURNS", "SHARED"),
                    help=argparse.SUPPRESS)  # a child: seed one home with the code it runs
    args = ap.parse_args()
    if args.seed:
        url, sessions, turns, shared = args.seed
        mem, why = pg_memory(url)
        if mem is None:
            print(why, file=sys.stderr)
            return 1
        seed_sessions(mem.store, int(sessions), int(turns), int(shared))
        mem.close()
        return 0
    global PROFILE
    PROFILE = args.profile
    if args.quick:
        args.sessions, args.turns = 100, 10
    if args.kill_every is None:
        args.kill_every = 0.5 if args.quick else 3.0
    server = None
    if not args.url:
        server = PgServer()
        args.url = server.start()
    with contextlib.ExitStack() as stack:
        if server is not None:
            stack.callback(server.stop)
        print(f"# bench_pg_workers: {args.sessions} sessions x {args.turns} turns, "
              f"{os.cpu_count()} cores, load {load()} at start")
        if args.only in (None, "queue"):
            show("the queue alone (probe jobs)", queue_section(
                args.url, args.queue_sessions or args.sessions, args.turns, args.kill_every),
                 "jobs_s",
                 "run twice at once / bodies run twice (a kill between body and commit)")
        if args.only in (None, "memory"):
            srcs = {"ours": ROOT / "src"}
            if args.baseline_rev and args.baseline_src:
                srcs[args.baseline_rev] = Path(args.baseline_src)
            elif args.baseline_rev:
                srcs[args.baseline_rev] = baseline_src(args.baseline_rev, Path(
                    stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-base-"))))
            found = memory_section(args.url, args.sessions, args.turns, args.kill_every,
                                   srcs=srcs, kill=args.kill_every > 0, counts=tuple(
                                       int(n) for n in args.workers.split(",")))
            for name, rows in found.items():
                show_memory(f"memory work (embedded writer), every session its own subject: "
                            f"{name}", rows, os.cpu_count() or 1)
                show_workers(rows)
                show_breakdown(rows, os.cpu_count() or 1)
            if args.baseline_rev:
                show_versus(found["ours"], found[args.baseline_rev], args.baseline_rev)
            if args.shared_topics:
                shared = args.shared_sessions or min(args.sessions, 100)
                found = memory_section(args.url, shared, args.turns, args.kill_every,
                                       shared=args.shared_topics, counts=(1, 4), kill=False,
                                       srcs=srcs)
                for name, rows in found.items():
                    show_memory(f"memory work, {shared} sessions each on one of "
                                f"{args.shared_topics} shared subjects (all workers write the "
                                f"same topics): {name}", rows, os.cpu_count() or 1)
        if args.only in (None, "single"):
            show("one writing process: directory vs PostgreSQL home", single_section(
                args.url, args.sessions, args.turns), "turns_s")
        print(f"\nload {load()} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
