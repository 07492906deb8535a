"""kill -9 real ``scriptorium`` CLI processes during every command that writes, then check
that nothing was lost and nothing was written outside the home.

Each round runs one command as a user would (``python -m scriptorium --home … <command>``, in
its own process group) and SIGKILLs the whole group: at a named step boundary of the write path
(``SCRIPTORIUM_FAULT``, see scriptorium/faults.py) or after a random delay. The command is then
run again, unkilled, as the user would retry it; it must succeed. After every kill the marks
must still form a prefix of every live branch; after every retry the workspace must parse, pass
``git fsck`` and ``memory verify``, and nothing outside the home may have changed: the home
sits inside an enclosing git repository (its commits, index and files must stay as they were),
and ``HOME``, ``TMPDIR`` and the working directory are empty directories that must stay empty.
At the end a forced ``memory write --all`` must leave every live turn marked and cited exactly
once, on the main home and on every legacy home that ``migrate`` and ``backfill`` ran on.

Used by tests/faults/test_cli_kills.py (one round per command) and
benchmarks/faults_cli_kill.py (the README figures).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from scriptorium.sessions import SessionStore

from fault_workload import Workload, sentence
from faultkit import (
    INSTALL_STEPS, STEPS, InvariantBroken, check_marks_prefix, check_workspace, final_state,
)

REPO = Path(__file__).resolve().parents[2]
LEGACY_FIXTURE = REPO / "tests" / "data" / "openprogram-state" / "legacy-cursor"
# a small real Codex rollout (29 turns) for `import codex --write`
IMPORT_FILE = ("codex/madshn__localpush/"
               "rollout-2026-02-23T20-34-25-019c8bfe-ec25-79e0-97d7-bda6a9c575ff.jsonl")

# The commands killed, in the order a round visits them. Named steps are tried only where the
# command crosses the write path; every command is also killed after random delays.
COMMANDS = ["session add", "memory write", "memory write --all", "memory verify --repair",
            "memory migrate", "memory backfill", "memory reorganize", "memory watch",
            "memory search", "import codex --write"]
MARK_STEPS = ["mark-staged", "mid-mark"]
NAMED_STEPS = {"memory write": STEPS, "memory write --all": STEPS, "memory watch": STEPS,
               "import codex --write": STEPS, "memory backfill": INSTALL_STEPS,
               "memory reorganize": INSTALL_STEPS, "memory migrate": MARK_STEPS,
               "memory verify --repair": [*MARK_STEPS, "git-committed"]}


def shared_dir() -> Path | None:
    """``$SCRIPTORIUM_SHARED`` or ``<repo root>/../shared`` (the real transcripts)."""
    root = Path(os.environ.get("SCRIPTORIUM_SHARED") or REPO.parent / "shared")
    return root if (root / "realdata" / IMPORT_FILE).is_file() else None


@dataclass
class CliKills:
    rounds: Counter = field(default_factory=Counter)   # per command
    kills: Counter = field(default_factory=Counter)    # processes really SIGKILLed
    at_step: Counter = field(default_factory=Counter)  # of which at a named step
    unreached: Counter = field(default_factory=Counter)  # named step the command never crossed
    retries_ok: Counter = field(default_factory=Counter)
    checks: int = 0
    homes: int = 0
    eligible: int = 0
    omissions: int = 0
    uncited: int = 0
    duplicate_citations: int = 0
    outside_changes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        per = {cmd: {"rounds": self.rounds[cmd], "killed": self.kills[cmd],
                     "at_named_step": self.at_step[cmd], "step_not_reached": self.unreached[cmd],
                     "retries_ok": self.retries_ok[cmd]} for cmd in self.rounds}
        return {"commands": per, "kills": sum(self.kills.values()), "checks": self.checks,
                "homes": self.homes, "eligible_turns": self.eligible,
                "omissions": self.omissions, "uncited": self.uncited,
                "duplicate_citations": self.duplicate_citations,
                "files_written_outside_home": len(self.outside_changes)}


class Sandbox:
    """The enclosing repository, the homes inside it, and the empty HOME/TMPDIR/cwd."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.outer = root / "outer"
        self.home = self.outer / "home"
        self.env_dirs = [root / "userhome", root / "tmp", root / "cwd"]
        for d in [self.outer, *self.env_dirs]:
            d.mkdir(parents=True)
        self.git("init", "-q", "--initial-branch=main")
        self.git("config", "user.email", "t@t")
        self.git("config", "user.name", "t")
        (self.outer / "tracked.txt").write_text("mine\n")
        (self.outer / ".git" / "info" / "exclude").write_text("/home/\n/legacy-*/\n")
        self.git("add", "tracked.txt")
        self.git("commit", "-q", "-m", "outer")
        self.head = self.git("rev-parse", "HEAD")

    def git(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        return subprocess.run(["git", *args], cwd=self.outer, env=env, capture_output=True,
                              text=True, check=True).stdout.strip()

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SCRIPTORIUM_", "GIT_"))}
        env.update(HOME=str(self.env_dirs[0]), TMPDIR=str(self.env_dirs[1]))
        return env

    def outside_changes(self) -> list[str]:
        """Everything written outside the homes: the enclosing repo's commits, index and
        files, and anything in HOME, TMPDIR or the working directory."""
        out = []
        if self.git("rev-parse", "HEAD") != self.head:
            out.append("the enclosing repository got a commit")
        status = self.git("status", "--porcelain", "--ignored", "--untracked-files=all")
        out += [f"enclosing repository: {line}" for line in status.splitlines()
                if not line[3:].startswith(("home/", "legacy-"))]
        for d in self.env_dirs:
            out += [str(p) for p in d.rglob("*")]
        return out


def run_cli(box: Sandbox, home: Path, args: list[str], *, fault: str | None = None,
            kill_after: float | None = None, timeout: float = 300.0
            ) -> tuple[subprocess.CompletedProcess[str], bool, float]:
    """Run the real CLI; returns (result, killed, seconds). ``fault`` kills it at a named
    step (it kills itself; its process group is then cleared); ``kill_after`` SIGKILLs the
    group after that many seconds."""
    env = box.env()
    if fault:
        env["SCRIPTORIUM_FAULT"] = fault
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "scriptorium", "--home", str(home), *args],
                            cwd=box.env_dirs[2], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    if kill_after is not None:
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise InvariantBroken(f"scriptorium {args} did not finish in {timeout}s") from None
    killed = proc.returncode == -signal.SIGKILL
    if killed:
        try:  # a git child the process was waiting on
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    seconds = time.monotonic() - started
    return subprocess.CompletedProcess(args, proc.returncode, out, err), killed, seconds


class Campaign:
    """One sandbox, one main home grown by a branching workload, legacy homes for migrate and
    backfill; ``round(command)`` kills one run of ``command`` and retries it."""

    def __init__(self, root: Path, seed: int = 0, *, random_share: float = 0.5,
                 progress: Callable[[str], None] | None = None) -> None:
        self.box = Sandbox(root)
        self.rng = random.Random(seed)
        self.random_share = random_share
        self.progress = progress
        self.stats = CliKills()
        self.work = Workload(SessionStore(self.box.home / "sessions"), seed=seed)
        self.work.run(8)
        self.legacy: list[Path] = []
        self.busy: dict[str, list[float]] = {}
        shared = shared_dir()
        self.import_file = shared / "realdata" / IMPORT_FILE if shared else None
        self.counter = 0

    # -- one command: its arguments, the home it runs on, and the state it needs -----------

    def _prepare(self, command: str) -> tuple[Path, list[str]]:
        home = self.box.home
        self.work.run(2)  # something pending for the writes
        if command == "session add":
            self.counter += 1
            sid = self.rng.choice(self.work.sessions)
            role = "user" if self.counter % 2 else "assistant"
            return home, ["session", "add", sid, "--role", role, "--id",
                          f"cli{self.counter:04d}", "--text", sentence(self.rng)]
        if command == "memory write":
            sid = self.rng.choice(self.work.sessions)
            return home, ["memory", "write", sid, "--trigger-tokens", "40", "--json"]
        if command == "memory write --all":
            return home, ["memory", "write", "--all", "--force", "--json"]
        if command == "memory verify --repair":
            archives = sorted((home / "memory" / "sources").rglob("*.md"))
            if archives:  # something to repair: garbage appended to one evidence archive
                with open(self.rng.choice(archives), "ab") as fh:
                    fh.write(b"\n<!-- torn \x00 frame")
            return home, ["memory", "verify", "--repair", "--json"]
        if command in ("memory migrate", "memory backfill"):
            legacy = self.box.outer / f"legacy-{len(self.legacy)}"
            shutil.copytree(LEGACY_FIXTURE, legacy)
            self.legacy.append(legacy)
            if command == "memory migrate":
                return legacy, ["memory", "migrate", "--json"]
            return legacy, ["memory", "backfill", "--json"]
        if command == "memory reorganize":
            return home, ["memory", "reorganize", "--json"]
        if command == "memory watch":
            return home, ["memory", "watch", "--once", "--idle-seconds", "0", "--json"]
        if command == "memory search":
            return home, ["memory", "search", sentence(self.rng, 3), "--json"]
        if command == "import codex --write":
            assert self.import_file is not None
            return home, ["import", "codex", str(self.import_file), "--write", "--json"]
        raise ValueError(command)

    def commands(self) -> list[str]:
        return [c for c in COMMANDS if c != "import codex --write" or self.import_file]

    def round(self, command: str) -> None:
        home, args = self._prepare(command)
        stats = self.stats
        stats.rounds[command] += 1
        busy = self.busy.setdefault(command, [])
        fault = None
        share = self.random_share if len(NAMED_STEPS.get(command, ())) > 3 else \
            (1 + self.random_share) / 2  # few named steps (often not crossed): more random kills
        if command in NAMED_STEPS and self.rng.random() >= share:
            fault = self.rng.choice(NAMED_STEPS[command])
            run, killed, _ = run_cli(self.box, home, args, fault=fault)
        else:
            estimate = sum(busy[-5:]) / len(busy[-5:]) if busy else 0.8
            # past the interpreter's start (about a third of a short command), into the work
            run, killed, _ = run_cli(self.box, home, args,
                                     kill_after=self.rng.uniform(0.3, 1.1) * estimate)
        if killed:
            stats.kills[command] += 1
            stats.at_step[command] += fault is not None
            if command != "memory verify --repair":  # that one starts from damage we made
                check_marks_prefix(home)
                stats.checks += 1
        elif fault is not None:
            stats.unreached[command] += 1
        elif run.returncode != 0:
            raise InvariantBroken(f"{args} failed before its kill: {run.stderr[-2000:]}")
        # the user retries the same command; it must succeed
        retry, _, seconds = run_cli(self.box, home, args)
        if retry.returncode != 0:
            raise InvariantBroken(f"retry of {args} after a kill failed "
                                  f"(exit {retry.returncode}): {retry.stderr[-2000:]}")
        busy.append(seconds)
        stats.retries_ok[command] += 1
        if command == "memory migrate":  # the legacy home goes on to its backfill
            self._retry_ok(home, ["memory", "backfill", "--json"])
        check_workspace(home)
        stats.checks += 1
        self._check_outside()
        if self.progress:
            self.progress(f"{command}: killed={killed} step={fault}")

    def _retry_ok(self, home: Path, args: list[str]) -> None:
        run, _, _ = run_cli(self.box, home, args)
        if run.returncode != 0:
            raise InvariantBroken(f"{args} failed: {run.stderr[-2000:]}")

    def _check_outside(self) -> None:
        changes = self.box.outside_changes()
        if changes:
            self.stats.outside_changes = changes
            raise InvariantBroken(f"written outside the home: {changes[:10]}")

    def finish(self) -> CliKills:
        """A forced write of everything on every home, then: every live turn marked and cited,
        none cited twice, nothing outside the homes."""
        stats = self.stats
        for home in [self.box.home, *self.legacy]:
            if (home / "memory" / ".scriptorium" / "runtime.json").exists() and \
                    "cursors" in json.loads(
                        (home / "memory" / ".scriptorium" / "runtime.json").read_text()):
                self._retry_ok(home, ["memory", "migrate", "--json"])
            self._retry_ok(home, ["memory", "write", "--all", "--force", "--trigger-tokens",
                                  "1", "--json"])
            check_workspace(home)
            final = final_state(home)
            stats.homes += 1
            stats.eligible += final.eligible
            stats.omissions += len(final.omissions)
            stats.uncited += len(final.uncited)
            stats.duplicate_citations += len(final.duplicate_citations)
        self._check_outside()
        return stats


def run_cli_kills(root: Path, *, rounds: int, seed: int = 0,
                  commands: list[str] | None = None, random_share: float = 0.5,
                  progress: Callable[[str], None] | None = None) -> CliKills:
    """``rounds`` kills tried per command, the commands interleaved; raises InvariantBroken
    at the first broken invariant. ``random_share``: the share of random-delay kills for
    commands that cross named steps (the others are always killed after a random delay)."""
    campaign = Campaign(root, seed, random_share=random_share, progress=progress)
    chosen = [c for c in campaign.commands() if commands is None or c in commands]
    for _ in range(rounds):
        for command in chosen:
            started = time.monotonic()
            campaign.round(command)
            campaign.stats.seconds[command] = round(
                campaign.stats.seconds.get(command, 0.0) + time.monotonic() - started, 1)
    return campaign.finish()
