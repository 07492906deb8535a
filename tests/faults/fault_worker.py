"""The process the fault tests kill: ``python fault_worker.py <command> <home> [options]``.

Commands:

* ``write``: one pass of the per-turn (``--mode turn``) or session-boundary (``--mode session``)
  write path over every session. ``--kill-at STEP:N`` SIGKILLs this process at the N-th time it
  reaches the named step (N=1 goes through ``SCRIPTORIUM_FAULT``, set by the caller).
* ``turn-loop``: the per-turn writer in a loop (races).
* ``watch-loop``: idle-watcher passes with idle 0 (races).
* ``append``: the branching workload, appending (races).

Every batch handed to the writer is appended to ``--audit`` (one JSON line, fsynced before the
writer runs), so the parent can count how often each turn reached the writer. Marks a step made
go to ``--marks`` the same way, so the parent can check that no mark was lost afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scriptorium import faults  # noqa: E402
from scriptorium.config import load_settings  # noqa: E402
from scriptorium.memory.writers.embedded import EmbeddedWriter  # noqa: E402
from scriptorium.memory.writing import Memory  # noqa: E402


def append_line(path: str | None, obj: dict) -> None:
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (json.dumps(obj) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


class AuditedWriter(EmbeddedWriter):
    """The embedded writer, logging every batch it is handed before it writes."""

    def __init__(self, audit: str | None):
        self.audit = audit

    def write(self, request):
        append_line(self.audit, {"pid": os.getpid(), "t": time.time(),
                                 "batch": [r.source_id for r in request.batch]})
        return super().write(request)


class MarkFirstMemory(Memory):
    """The baseline for the README figures: the order the written-marker note forbids
    (archive, MARK, then write and install). A crash after the mark and before the install
    leaves turns marked that memory never took in: they are lost, silently."""

    def write_batch(self, session_id, batch, tip=None, own_blocks=()):
        from scriptorium.faults import fault_point
        from scriptorium.memory.failures import classify
        from scriptorium.memory.records import MARK_KEY
        from scriptorium.memory.writers import WriteJob, run_writer
        from scriptorium.memory.writing import StepResult, to_source_record

        step = StepResult(batch_ids=[r.node_id for r in batch], tip=tip)
        if not batch:
            return step
        try:
            with self.workspace.lock(timeout=1.0):
                self.workspace.sources.archive([to_source_record(r) for r in batch])
                fault_point("after-archive")
                fault_point("before-mark")
                self.store.merge_node_metadata_batch(
                    session_id, {r.node_id: {MARK_KEY: self.workspace_id} for r in batch})
                fault_point("after-mark")
                step.marked = [r.node_id for r in batch]
                from scriptorium.memory.citations import cited_sources
                result, _ = run_writer(
                    self.workspace, self.writer,
                    WriteJob(batch=list(batch), cited=frozenset(cited_sources(self.workspace)),
                             session_title=str(self.store.get_meta(session_id).get("title")
                                               or "")),
                    refs=[r.source_id for r in batch],
                    message=f"memory: write {len(batch)} turn(s) of {session_id}")
                step.changed_files = list(result.changed_files)
        except Exception as exc:
            step.failure = classify(exc)
        return step


BASELINES = {"mark-first": MarkFirstMemory}


def open_memory(home: str, trigger: int, audit: str | None, baseline: str | None = None) -> Memory:
    cls = BASELINES[baseline] if baseline else Memory
    return cls(home, settings=load_settings(Path(home), {"trigger_tokens": trigger}),
               writer=AuditedWriter(audit))


def kill_at(spec: str | None) -> None:
    """Install a hook that SIGKILLs this process at the N-th crossing of a named step."""
    if not spec:
        return
    step, _, nth = spec.partition(":")
    target = int(nth or "1")
    seen = [0]

    def hook(name: str) -> None:
        if name != step:
            return
        seen[0] += 1
        if seen[0] == target:
            flag = os.environ.get("SCRIPTORIUM_FAULT_FLAG")
            if flag:
                Path(flag).write_text(step)
            os.kill(os.getpid(), signal.SIGKILL)

    faults.HOOK = hook


def log_marks(path: str | None, results) -> None:
    for result in results:
        if result.marked:
            append_line(path, {"pid": os.getpid(), "session_id": result.session_id,
                               "marked": result.marked})


def cmd_write(args) -> int:
    kill_at(args.kill_at)
    mem = open_memory(args.home, args.trigger, args.audit, args.baseline)
    print("ready", flush=True)
    results = mem.write(force=args.mode == "session")
    log_marks(args.marks, results)
    failures = [r.to_dict() for r in results if r.failure]
    print(json.dumps({"batches": sum(len(r.steps) for r in results),
                      "marked": sum(len(r.marked) for r in results), "failures": failures}),
          flush=True)
    return 0


def _stop(args, loops: int) -> bool:
    return loops >= args.max_loops or (args.until and Path(args.until).exists()
                                       and loops >= args.min_loops)


def cmd_turn_loop(args) -> int:
    mem = open_memory(args.home, args.trigger, args.audit)
    loops = 0
    failures: dict[str, int] = {}
    while not _stop(args, loops):
        for row in mem.store.list_sessions():
            result = mem.write_turn(row["session_id"])
            log_marks(args.marks, [result])
            if result.failure:
                failures[result.failure.reason_code] = failures.get(
                    result.failure.reason_code, 0) + 1
        loops += 1
        time.sleep(args.pause)
    print(json.dumps({"loops": loops, "failures": failures}), flush=True)
    return 0


def cmd_watch_loop(args) -> int:
    from scriptorium.memory.watcher import IdleWatcher

    mem = open_memory(args.home, args.trigger, args.audit)
    watcher = IdleWatcher(mem, idle_seconds=0, interval_seconds=0)
    loops = 0
    retry: dict[str, int] = {}
    while not _stop(args, loops):
        report = watcher.run_once()
        for entry in report.written + report.retry_later + report.terminal:
            if entry.get("marked"):
                append_line(args.marks, {"pid": os.getpid(), "session_id": entry["session_id"],
                                         "marked": entry["marked"]})
        for entry in report.retry_later + report.terminal:
            code = entry["failure"]["reason_code"]
            retry[code] = retry.get(code, 0) + 1
        loops += 1
        time.sleep(args.pause)
    print(json.dumps({"loops": loops, "failures": retry}), flush=True)
    return 0


def cmd_append(args) -> int:
    from fault_workload import Workload
    from scriptorium.sessions import SessionStore

    names = tuple(f"{args.prefix}{name}" for name in ("alpha", "beta", "gamma"))
    work = Workload(SessionStore(Path(args.home) / "sessions"), seed=args.seed,
                    sessions=names, prefix=args.prefix)
    for _ in range(args.steps):
        kind, sid, touched = work.step()
        append_line(args.log, {"kind": kind, "session_id": sid, "nodes": touched})
    if args.until:
        Path(args.until).write_text("done")
    print(json.dumps({"steps": args.steps}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["write", "turn-loop", "watch-loop", "append"])
    parser.add_argument("home")
    parser.add_argument("--mode", choices=["turn", "session"], default="session")
    parser.add_argument("--trigger", type=int, default=40)
    parser.add_argument("--audit")
    parser.add_argument("--marks")
    parser.add_argument("--kill-at")
    parser.add_argument("--baseline", choices=sorted(BASELINES))
    parser.add_argument("--until")
    parser.add_argument("--min-loops", type=int, default=1)
    parser.add_argument("--max-loops", type=int, default=50)
    parser.add_argument("--pause", type=float, default=0.005)  # between loops: share the CPU
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--log")
    parser.add_argument("--prefix", default="")  # append: own sessions and ids per process
    args = parser.parse_args(argv)
    return {"write": cmd_write, "turn-loop": cmd_turn_loop, "watch-loop": cmd_watch_loop,
            "append": cmd_append}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
