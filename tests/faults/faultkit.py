"""The crash-injection harness and the invariant checks the fault tests share.

``run_campaign`` grows a branching workload and, round after round, runs the write path in a
real process that is SIGKILLed at a named step boundary (the N-th crossing of it) or after a
random delay (the whole process group, so a ``git`` child dies too), then restarts the write in
a fresh process, as a real system would. After every crash and every restart it checks the
invariants; at the end it forces a write of everything and checks that nothing was lost.

Used by tests/faults/test_crash_harness.py (CI-sized) and benchmarks/faults_crash.py (the
README figures: ``SCRIPTORIUM_FAULT_ROUNDS``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scriptorium.config import load_settings
from scriptorium.memory.citations import block_sources, cited_sources
from scriptorium.memory.records import MARK_KEY
from scriptorium.memory.verify import verify
from scriptorium.memory.workspace import Workspace
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore

from fault_workload import Workload

WORKER = Path(__file__).resolve().parent / "fault_worker.py"

# Every named step boundary of one write: the write path's, then the install's. With the
# embedded writer an install touches runtime.json (entry 0) and one topic file (entry 1).
WRITE_STEPS = ["after-archive", "writer-ran", "before-mark", "mark-staged", "mid-mark",
               "after-mark"]
INSTALL_STEPS = ["before-prepare", "prepared", "backed-up-0", "backed-up-1", "moved-in-0",
                 "moved-in-1", "committed", "cleaned", "git-committed"]
STEPS = WRITE_STEPS + INSTALL_STEPS


class InvariantBroken(AssertionError):
    """A check failed; the message says which and where."""


# -- running the worker ----------------------------------------------------------------------------


@dataclass
class Run:
    pid: int
    returncode: int
    killed: bool
    stdout: str
    stderr: str
    busy_seconds: float | None  # from "ready" to exit, for runs that were not killed


def worker_env(fault: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRIPTORIUM_FAULT")}
    if fault:
        env["SCRIPTORIUM_FAULT"] = fault
    return env


def run_worker(args: list[str], *, fault: str | None = None, kill_after: float | None = None,
               timeout: float = 120.0) -> Run:
    """Run fault_worker.py; with ``kill_after`` SIGKILL its process group that many seconds
    after it reported ready (if it has not finished by then)."""
    proc = subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=worker_env(fault),
                            start_new_session=True)
    ready_at = None
    first = proc.stdout.readline() if proc.stdout else ""
    if first.strip() == "ready":
        ready_at = time.monotonic()
        if kill_after is not None:
            deadline = ready_at + kill_after
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise InvariantBroken(f"worker {args} did not finish in {timeout}s: {err[-2000:]}")
    busy = time.monotonic() - ready_at if ready_at is not None and proc.returncode == 0 else None
    run = Run(proc.pid, proc.returncode, proc.returncode == -signal.SIGKILL,
              (first if first.strip() != "ready" else "") + out, err, busy)
    if not run.killed and run.returncode != 0:
        raise InvariantBroken(f"worker {args} failed (exit {run.returncode}): {err[-3000:]}")
    return run


# -- reading what happened -------------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict]:
    """Every complete JSON line (a line torn by a kill is not a record)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def redone_batches(audit: list[dict]) -> Counter:
    """pid -> how many of its writer calls were handed a turn some earlier call was handed."""
    seen: set[str] = set()
    redone: Counter = Counter()
    for entry in audit:
        batch = entry["batch"]
        if any(ref in seen for ref in batch):
            redone[entry["pid"]] += 1
        seen.update(batch)
    return redone


def check_redos(audit: list[dict], runs: list[tuple[int, bool]]) -> tuple[int, int]:
    """A crash costs a redo, never more. ``runs``: (pid, killed) in the order they ran.

    * turn level: a turn reaches the writer again only because a run that was handed it
      crashed (hand-offs of a turn <= 1 + hand-offs of it in crashed runs);
    * batch level: after every run, the batches redone so far <= the crashes so far (the rest
      of an interrupted batch may be redone later than the restart: a per-turn restart waits
      for the threshold, and the final forced write pays it).

    Returns (redone batches, redundant turn hand-offs); raises InvariantBroken."""
    killed = {pid for pid, k in runs if k}
    hands: Counter = Counter()
    crashed_hands: Counter = Counter()
    for entry in audit:
        for ref in entry["batch"]:
            hands[ref] += 1
            if entry["pid"] in killed:
                crashed_hands[ref] += 1
    over = [ref for ref, n in hands.items() if n > 1 + crashed_hands[ref]]
    if over:
        raise InvariantBroken(f"turns handed to the writer again without a crash: {over[:5]}")
    per_pid = redone_batches(audit)
    crashes = redone = 0
    for pid, was_killed in runs:
        redone += per_pid.get(pid, 0)
        if redone > crashes:
            raise InvariantBroken(f"run {pid} brought redone batches to {redone} after only "
                                  f"{crashes} crash(es)")
        crashes += was_killed
    return redone, sum(n - 1 for n in hands.values())


# -- the invariants ----------------------------------------------------------------------------------


def open_memory(home: Path, trigger: int = 40, *, recover: bool = True) -> Memory:
    ws = Workspace.open(home / "memory") if recover else Workspace(home / "memory")
    return Memory(home, settings=load_settings(home, {"trigger_tokens": trigger}), workspace=ws)


def check_files(home: Path) -> int:
    """No torn file anywhere: every node, meta and runtime file parses, every topic file
    parses strictly, every v2 archive file parses complete, no duplicate seq. Returns the
    number of files checked."""
    checked = 0
    sessions = home / "sessions"
    dirs = sorted(p for p in sessions.iterdir() if p.is_dir()) if sessions.exists() else []
    # the store's own files (sessions/.scriptorium: the head-move log) are not a session
    for sdir in [d for d in dirs if (d / "meta.json").exists() or (d / "history").exists()]:
        seqs: dict[int, str] = {}
        for path in sorted((sdir / "history").glob("*.json")):
            try:
                node = json.loads(path.read_bytes())
            except ValueError as exc:
                raise InvariantBroken(f"torn node file {path}: {exc}") from None
            seq = node.get("seq")
            if seq in seqs:
                raise InvariantBroken(f"duplicate seq {seq} in {sdir.name}: {seqs[seq]}, "
                                      f"{path.name}")
            if int(path.name.split("-", 1)[0]) != seq:
                raise InvariantBroken(f"{path.name}: file name and seq {seq} disagree")
            seqs[seq] = path.name
            checked += 1
        try:
            json.loads((sdir / "meta.json").read_bytes())
        except ValueError as exc:
            raise InvariantBroken(f"torn meta file in {sdir.name}: {exc}") from None
        checked += 1
    ws = Workspace(home / "memory")
    for rel in ws.topic_paths():
        ws.read_topic(rel, strict=True)  # raises TopicFormatError on any broken rule
        checked += 1
    for path in sorted(ws.sources_dir.rglob("*.md")) if ws.sources_dir.exists() else []:
        rel = path.relative_to(ws.root).as_posix()
        status = ws.sources.file_status(rel)
        if not status.complete:
            raise InvariantBroken(f"archive {rel} does not parse complete: {status.error}")
        checked += 1
    for name in ("runtime.json", "session-end.json"):
        path = ws.runtime_dir / name
        if path.exists():
            try:
                json.loads(path.read_bytes())
            except ValueError as exc:
                raise InvariantBroken(f"torn {path}: {exc}") from None
            checked += 1
    return checked


def check_marks_prefix(home: Path) -> None:
    """Right after a crash, before anything recovers: the marks still form a prefix of every
    live branch and every marked turn is archived (an interrupted install is allowed)."""
    report = verify(open_memory(home, recover=False))
    bad = [p for p in report.problems if p.kind in ("gap", "marked_not_archived",
                                                    "session_unreadable")]
    if bad:
        raise InvariantBroken(f"after a crash: {[p.to_dict() for p in bad]}")


def check_workspace(home: Path) -> None:
    """After a restart: the workspace parses, its git store is intact, verify is ok with
    nothing marked-but-uncited (the embedded writer cites every turn it is handed)."""
    mem = open_memory(home)
    check_files(home)
    if mem.workspace.journal_path.exists():
        raise InvariantBroken("an install journal survived a restart")
    if not mem.workspace.git.fsck():
        raise InvariantBroken("git fsck failed on the memory workspace")
    if not git_clean(home, "topics"):
        raise InvariantBroken("installed topic files are missing from the git history")
    report = verify(mem)
    if report.problems:
        raise InvariantBroken(f"verify: {[p.to_dict() for p in report.problems]}")


def git_clean(home: Path, *paths: str) -> bool:
    """Does the workspace history hold ``paths`` (default: topics and sources) as they are?
    (Archived evidence rides along with the next install, so sources may lag until then.)"""
    out = subprocess.run(["git", "-C", str(home / "memory"), "status", "--porcelain", "--",
                          *(paths or ("topics", "sources"))],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip() == ""


def written_twice(workspace: Workspace) -> list[str]:
    """Turns a redo wrote again: cited by two blocks that say the same thing. (One turn may
    back several different claims: a fact and the current-state line summing it up.)"""
    seen: Counter[tuple[str, str]] = Counter()
    for doc in workspace.topic_docs():
        for block in doc.blocks:
            said = " ".join(claim.text for claim in block.claims)
            for ref in block_sources(workspace, doc, block):
                seen[(ref, said)] += 1
    return sorted({ref for (ref, _), n in seen.items() if n > 1})


@dataclass
class Final:
    eligible: int = 0
    omissions: list[str] = field(default_factory=list)
    uncited: list[str] = field(default_factory=list)
    duplicate_citations: list[str] = field(default_factory=list)
    commits: int = 0


def final_state(home: Path) -> Final:
    """Every eligible turn of every live branch: marked for this workspace and cited."""
    mem = open_memory(home, trigger=1)
    out = Final()
    out.duplicate_citations = written_twice(mem.workspace)
    cited = cited_sources(mem.workspace)
    seen: set[str] = set()
    for row in mem.store.list_sessions():
        sid = row["session_id"]
        for tip in mem.live_tips(sid):
            if tip is None:
                continue
            for rec in mem.branch_records(sid, tip):
                if rec.node_id in seen:
                    continue
                seen.add(rec.node_id)
                if not rec.marked_for(mem.workspace_id):
                    out.omissions.append(rec.source_id)
                if rec.source_id not in cited:
                    out.uncited.append(rec.source_id)
    out.eligible = len(seen)
    out.commits = len(mem.workspace.git.log(limit=100_000))
    return out


# -- the campaign ---------------------------------------------------------------------------------


@dataclass
class Campaign:
    rounds: int = 0
    runs: int = 0
    crashes: int = 0
    crashes_at: Counter = field(default_factory=Counter)  # step name or "random"
    random_kills_tried: int = 0
    unreached: Counter = field(default_factory=Counter)  # named step not reached that run
    workload_ops: Counter = field(default_factory=Counter)
    handed: int = 0  # writer calls
    redone: int = 0  # writer calls re-handed a turn an earlier call was handed
    redundant_handoffs: int = 0  # turn hand-offs beyond the first
    checks: int = 0  # invariant checks passed (after each crash and each restart)
    final: Final | None = None
    git_clean: bool = False
    violations: list[str] = field(default_factory=list)  # baseline runs only

    def to_dict(self) -> dict[str, Any]:
        final = self.final or Final()
        return {"violations": len(self.violations), "rounds": self.rounds, "runs": self.runs, "crashes": self.crashes,
                "crashes_at": dict(self.crashes_at),
                "random_kills_tried": self.random_kills_tried,
                "unreached": dict(self.unreached), "workload_ops": dict(self.workload_ops),
                "writer_calls": self.handed, "redone_batches": self.redone,
                "redundant_turn_handoffs": self.redundant_handoffs,
                "checks": self.checks, "eligible_turns": final.eligible,
                "omissions": len(final.omissions), "uncited": len(final.uncited),
                "lost_turns": len(set(final.omissions) | set(final.uncited)),
                "duplicate_citations": len(final.duplicate_citations),
                "git_commits": final.commits, "git_clean": self.git_clean}


def schedule(rounds: int, rng: random.Random, random_share: float = 0.3) -> list[tuple]:
    """(kind, step, nth, mode) per round: every named step once first (at its first crossing,
    through SCRIPTORIUM_FAULT, in a forced write), then a mix of named steps at a random
    crossing and random-delay kills, alternating the per-turn and the boundary write path."""
    plan: list[tuple] = [("step", s, 1, "session") for s in STEPS]
    k = 0
    while len(plan) < rounds:
        mode = "turn" if k % 2 else "session"
        if rng.random() < random_share:
            plan.append(("random", None, 0, mode))
        else:
            plan.append(("step", rng.choice(STEPS), rng.randint(1, 3), mode))
        k += 1
    return plan  # never fewer rounds than named steps


def run_campaign(home: Path, *, rounds: int, seed: int = 0, ops_per_round: int = 4,
                 trigger: int = 40, random_share: float = 0.3, baseline: str | None = None,
                 progress=None) -> Campaign:
    """See the module docstring. Raises InvariantBroken at the first broken invariant.

    ``baseline`` ("mark-first") runs the same schedule with a write path in the order the
    written-marker note forbids, for the README's side-by-side figures: broken invariants are
    then counted in ``violations`` instead of raised."""

    def checked(fn, *args) -> None:
        try:
            fn(*args)
        except InvariantBroken as exc:
            if baseline is None:
                raise
            stats.violations.append(str(exc)[:300])

    rng = random.Random(seed)
    home.mkdir(parents=True, exist_ok=True)
    audit, marks = home.parent / f"{home.name}-audit.jsonl", home.parent / f"{home.name}-marks.jsonl"
    work = Workload(SessionStore(home / "sessions"), seed=seed)
    stats = Campaign()
    busy: list[float] = []
    order: list[tuple[int, bool]] = []  # (pid, killed) of every write run, in order
    base = ["--trigger", str(trigger), "--audit", str(audit), "--marks", str(marks)]
    if baseline:
        base += ["--baseline", baseline]
    work.run(ops_per_round * 2)
    for kind, step, nth, mode in schedule(rounds, rng, random_share):
        stats.rounds += 1
        for _ in range(ops_per_round):
            op, _, _ = work.step()
            stats.workload_ops[op] += 1
        args = ["write", str(home), "--mode", mode, *base]
        if kind == "random":
            stats.random_kills_tried += 1
            estimate = (sum(busy[-8:]) / len(busy[-8:])) if busy else 0.5
            run = run_worker(args, kill_after=rng.uniform(0.0, estimate * 1.2))
        elif nth == 1:
            run = run_worker(args, fault=step)
        else:
            run = run_worker([*args, "--kill-at", f"{step}:{nth}"])
        stats.runs += 1
        if run.busy_seconds is not None:
            busy.append(run.busy_seconds)
        if run.killed:
            stats.crashes += 1
            stats.crashes_at[step or "random"] += 1
            checked(check_marks_prefix, home)
            stats.checks += 1
        elif kind == "step":
            stats.unreached[step] += 1
        # the restart: a fresh process takes up the same write (and recovers what it must)
        restart = run_worker(["write", str(home), "--mode", mode, *base])
        stats.runs += 1
        if restart.busy_seconds is not None:
            busy.append(restart.busy_seconds)
        order += [(run.pid, run.killed), (restart.pid, False)]
        checked(check_redos, read_jsonl(audit), order)
        checked(check_workspace, home)
        stats.checks += 1
        if progress:
            progress(stats)
    final = run_worker(["write", str(home), "--mode", "session", *base, "--trigger", "1"])
    stats.runs += 1
    order.append((final.pid, False))
    checked(check_workspace, home)
    stats.checks += 1
    audit_lines = read_jsonl(audit)
    stats.handed = len(audit_lines)
    checked(check_redos, audit_lines, order)
    per_pid = redone_batches(audit_lines)
    stats.redone = sum(per_pid.values())
    stats.redundant_handoffs = sum(n - 1 for n in Counter(
        ref for entry in audit_lines for ref in entry["batch"]).values())
    stats.final = final_state(home)
    stats.git_clean = git_clean(home)
    return stats


def marked_ids(store: SessionStore, sid: str, workspace_id: str) -> set[str]:
    return {n.id for n in store.get_nodes(sid) if n.metadata.get(MARK_KEY) == workspace_id}


# -- races ----------------------------------------------------------------------------------------


@dataclass
class Race:
    appended: int = 0
    rewound: int = 0
    marks_logged: int = 0
    writer_calls: int = 0
    redundant_handoffs: int = 0  # a turn handed again because two writers raced for it
    failures: Counter = field(default_factory=Counter)  # retryable failures seen (reason code)
    turn_loops: int = 0
    watch_passes: int = 0
    final: Final | None = None

    def to_dict(self) -> dict[str, Any]:
        final = self.final or Final()
        return {"appended": self.appended, "rewound": self.rewound,
                "marks_logged": self.marks_logged, "writer_calls": self.writer_calls,
                "redundant_handoffs": self.redundant_handoffs, "failures": dict(self.failures),
                "turn_loops": self.turn_loops, "watch_passes": self.watch_passes,
                "eligible_turns": final.eligible, "omissions": len(final.omissions),
                "duplicate_citations": len(final.duplicate_citations)}


def run_race(home: Path, *, seed: int = 0, steps: int = 40, trigger: int = 30,
             max_loops: int = 3000) -> Race:
    """An appending process, the per-turn writer and the idle watcher (idle 0) on the same
    sessions at once, for ``steps`` workload operations (loops bounded by ``max_loops``);
    then the checks of issue 8 (see test_races.py). Raises InvariantBroken."""
    home.mkdir(parents=True, exist_ok=True)
    tag = home.name
    files = {name: home.parent / f"{tag}-{name}" for name in
             ("appends.jsonl", "marks.jsonl", "audit.jsonl", "done.flag")}
    common = ["--audit", str(files["audit.jsonl"]), "--marks", str(files["marks.jsonl"]),
              "--trigger", str(trigger), "--until", str(files["done.flag"]),
              "--min-loops", "2", "--max-loops", str(max_loops)]
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), "append", str(home), "--seed", str(seed),
                          "--steps", str(steps), "--log", str(files["appends.jsonl"]),
                          "--until", str(files["done.flag"])],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=worker_env()),
        subprocess.Popen([sys.executable, str(WORKER), "turn-loop", str(home), *common],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=worker_env()),
        subprocess.Popen([sys.executable, str(WORKER), "watch-loop", str(home), *common],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=worker_env()),
    ]
    outputs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise InvariantBroken("a racing process did not finish")
        if proc.returncode != 0:
            raise InvariantBroken(f"racing process {proc.args[2]} failed: {err[-3000:]}")
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    stats = Race(turn_loops=outputs[1]["loops"], watch_passes=outputs[2]["loops"])
    for out in outputs[1:]:
        stats.failures.update(out["failures"])

    mem = open_memory(home, trigger=1)
    nodes = {row["session_id"]: {n.id: n for n in mem.store.get_nodes(row["session_id"])}
             for row in mem.store.list_sessions()}
    # no lost turn, no lost rewind stamp
    for entry in read_jsonl(files["appends.jsonl"]):
        have = nodes.get(entry["session_id"], {})
        for nid in entry["nodes"]:
            if nid not in have:
                raise InvariantBroken(f"appended node {entry['session_id']}/{nid} is gone")
            if entry["kind"] == "rewind":
                stats.rewound += 1
                if not have[nid].rewound:
                    raise InvariantBroken(f"rewind stamp on {nid} was lost to a race")
            else:
                stats.appended += 1
    # no lost mark: every mark a writer reported is still on its node
    for entry in read_jsonl(files["marks.jsonl"]):
        for nid in entry["marked"]:
            stats.marks_logged += 1
            if nodes[entry["session_id"]][nid].metadata.get(MARK_KEY) != mem.workspace_id:
                raise InvariantBroken(f"the mark on {entry['session_id']}/{nid} was lost")
    check_files(home)  # no torn file, no duplicate seq
    report = verify(mem)
    if report.problems:  # no gap: a lost mark would have to be re-offered, never stranded
        raise InvariantBroken(f"verify after the race: {[p.to_dict() for p in report.problems]}")
    audit = read_jsonl(files["audit.jsonl"])
    stats.writer_calls = len(audit)
    handed = Counter(ref for entry in audit for ref in entry["batch"])
    stats.redundant_handoffs = sum(n - 1 for n in handed.values())
    # a final forced write leaves nothing pending anywhere
    for row in mem.store.list_sessions():
        result = mem.write_session(row["session_id"])
        if result.failure:
            raise InvariantBroken(f"final write failed: {result.failure.to_dict()}")
    stats.final = final_state(home)
    if stats.final.omissions or stats.final.duplicate_citations or stats.final.uncited:
        raise InvariantBroken(f"after the race: {stats.to_dict()}")
    check_workspace(home)
    return stats
