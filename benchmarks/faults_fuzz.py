"""The README's fuzzed-inputs and escapes-tried figures, per parser and per kind of escape.

Fuzzing: every parser of data scriptorium reads from disk or from users gets N inputs, seeded:
mutations of real samples (the fixtures in tests/data, the transcripts in ../shared/realdata:
bytes flipped, inserted, deleted, lines cut, duplicated or spliced, hostile tokens such as NUL,
a lone surrogate, `../`, a 10,000-character line) and random bytes. Each input must be accepted
or refused with scriptorium's own error (ScriptoriumError: one line); anything else is a crash.

Escapes: hostile ids and paths (`..`, absolute paths, backslashes, NUL, 300 characters,
case twins) at every entry point that turns an id or a path into a file (session and node ids,
source ids, topic paths, import session ids), and symlinks swapped in for every path the store
and the workspace write, each followed by the command that writes there. After each attempt
nothing may have changed outside the home: a sibling directory, the symlinks' targets and the
enclosing directory are compared byte for byte.

    python benchmarks/faults_fuzz.py                    # 1,000 inputs per parser
    SCRIPTORIUM_FUZZ_INPUTS=5000 python benchmarks/faults_fuzz.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from scriptorium.config import load_settings
from scriptorium.errors import ScriptoriumError
from scriptorium.memory.workspace import Workspace
from scriptorium.memory.search import follow
from scriptorium.memory.sources import parse_v2, read_legacy, read_text, split_source_id
from scriptorium.memory.topics import TopicDoc, TopicFormatError, parse_topic_bytes
from scriptorium.memory.status import show
from scriptorium.sessions import SessionStore

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / "tests" / "data" / "openprogram-state" / "written"
REALDATA = Path(os.environ.get("SCRIPTORIUM_SHARED") or ROOT.parent / "shared") / "realdata"
HOSTILE = [b"\x00", b"\xed\xa0\x80", b"../", b"/etc/passwd", b"\\..\\", b"\xff\xfe", b"\r\n",
           b'"', b"{", b"]", b"[^e1]", b"^", b"<!--", b"-->", b"x" * 10_000, b"\n\n\n"]


# -- inputs --------------------------------------------------------------------------------------


def mutate(rng: random.Random, seeds: list[bytes]) -> bytes:
    """One fuzzed input: random bytes, or a seed changed in one to four ways."""
    if rng.random() < 0.2:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 400)))
    data = bytearray(rng.choice(seeds))
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        at = rng.randint(0, len(data))
        if op == 0 and data:  # flip a byte
            data[min(at, len(data) - 1)] = rng.getrandbits(8)
        elif op == 1:  # insert a hostile token
            data[at:at] = rng.choice(HOSTILE)
        elif op == 2:  # cut a span
            del data[at:at + rng.randint(1, 64)]
        elif op == 3:  # truncate
            del data[at:]
        elif op == 4:  # duplicate a line
            lines = bytes(data).split(b"\n")
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            data = bytearray(b"\n".join(lines))
        elif op == 5:  # splice another seed in
            other = rng.choice(seeds)
            data[at:at] = other[rng.randint(0, len(other)):]
        else:  # swap two lines
            lines = bytes(data).split(b"\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            data = bytearray(b"\n".join(lines))
    return bytes(data)


def head_lines(path: Path, n: int = 40) -> bytes:
    with open(path, "rb") as fh:
        return b"".join(fh.readline() for _ in range(n))


# -- the parsers -----------------------------------------------------------------------------------


class Scratch:
    """A home with one session and a workspace copied from the fixtures, reset per input."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        shutil.copytree(STATE, self.home)
        self.node = next((self.home / "sessions" / "deploy" / "history").glob("*.json"))
        self.meta = self.home / "sessions" / "deploy" / "meta.json"
        self.saved = {p: p.read_bytes() for p in (self.node, self.meta)}
        self.root = root

    def restore(self) -> None:
        for path, data in self.saved.items():
            path.write_bytes(data)


def parsers(scratch: Scratch) -> dict[str, tuple[list[bytes], Callable[[bytes], bool]]]:
    """name -> (seed inputs, target(data) -> accepted?); a refusal raises ScriptoriumError."""
    topics = [p.read_bytes() for p in (STATE / "memory" / "topics").rglob("*.md")]
    archive_rel = "sources/openprogram/_v2/offsite.md"
    archives = [(STATE / "memory" / archive_rel).read_bytes()]
    nodes, metas = [scratch.saved[scratch.node]], [scratch.saved[scratch.meta]]
    runtime = [(STATE / "memory" / ".scriptorium" / "runtime.json").read_bytes()]
    config = [b'[memory]\ntrigger_tokens = 16000\nidle_allowance_seconds = 3600\n'
              b'side_branches = "conversation"\n\n[watcher]\nidle_seconds = 1800\n\n'
              b'[writer]\nkind = "embedded"\n\n[writer.llm]\nbase_url = "http://127.0.0.1:9/v1"'
              b'\nmodel = "m"\ntimeout_seconds = 60\nrun_timeout_seconds = 300\n']

    def topic(data: bytes) -> bool:
        try:
            parse_topic_bytes(data, "topics/a/b.md")
            ok = True
        except TopicFormatError:
            ok = False
        if not isinstance(parse_topic_bytes(data, "topics/a/b.md", strict=False), TopicDoc):
            raise AssertionError("the lenient parse returned no document")
        return ok

    def archive(data: bytes) -> bool:
        text = read_text(data)
        result = parse_v2(text, archive_rel)
        read_legacy(text, "sources/openprogram/offsite.md")
        return bool(result.complete)

    def session_file(path: Path) -> Callable[[bytes], bool]:
        def target(data: bytes) -> bool:
            path.write_bytes(data)
            try:
                store = SessionStore(scratch.home / "sessions", git=False)
                store.list_sessions()
                store.get_meta("deploy")
                store.get_branch("deploy")
                return True
            finally:
                scratch.restore()
        return target

    def settings(data: bytes) -> bool:
        (scratch.root / "config.toml").write_bytes(data)
        load_settings(scratch.root, environ={})
        return True

    def runtime_json(data: bytes) -> bool:
        ws = Workspace(scratch.home / "memory")
        ws.runtime_path.write_bytes(data)
        ws.load_runtime()  # tolerant by contract: a broken file means defaults
        return True

    def source_id(data: bytes) -> bool:
        split_source_id(data.decode("utf-8", "surrogateescape"))  # as argv decodes
        return True

    out = {
        "topic files": (topics, topic),
        "evidence archives (v2 frames and legacy)": (archives, archive),
        "session node files": (nodes, session_file(scratch.node)),
        "session meta.json": (metas, session_file(scratch.meta)),
        "config.toml": (config, settings),
        "runtime.json (tolerant: broken = defaults)": (runtime, runtime_json),
        "source ids": ([b"openprogram/deploy/d1", b"claude-code/abc/def/ghi"], source_id),
    }
    for kind in ("claude-code", "codex", "pi", "chatgpt"):
        files = sorted((REALDATA / kind).rglob("*.json*")) if REALDATA.is_dir() else []
        if files:
            out[f"import {kind}"] = ([head_lines(f) if kind != "chatgpt" else f.read_bytes()
                                      for f in files[:3]], importer(scratch, kind))
    return out


def importer(scratch: Scratch, kind: str) -> Callable[[bytes], bool]:
    from scriptorium.importers import import_sources

    suffix = ".json" if kind == "chatgpt" else ".jsonl"

    def target(data: bytes) -> bool:
        home = scratch.root / f"import-{kind}"
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir()
        src = home / f"input{suffix}"
        src.write_bytes(data)
        result = import_sources(SessionStore(home / "sessions", git=False), home, kind, [src])
        return not any(f.errors for f in result.files)
    return target


def fuzz(n: int, seed: int, root: Path) -> list[dict]:
    rng = random.Random(seed)
    scratch = Scratch(root)
    rows = []
    for name, (seeds, target) in parsers(scratch).items():
        counts = {"parser": name, "inputs": n, "accepted": 0, "refused": 0, "crashed": 0,
                  "examples": []}
        started = time.monotonic()
        for _ in range(n):
            data = mutate(rng, seeds)
            try:
                counts["accepted" if target(data) else "refused"] += 1
            except ScriptoriumError as exc:
                if "\n" in str(exc):
                    raise AssertionError(f"{name}: a multi-line error: {exc!r}") from None
                counts["refused"] += 1
            except Exception as exc:  # noqa: BLE001 - a crash is what we count
                counts["crashed"] += 1
                if len(counts["examples"]) < 3:
                    counts["examples"].append(f"{type(exc).__name__}: {exc}"[:200])
        counts["seconds"] = round(time.monotonic() - started, 1)
        rows.append(counts)
    return rows


# -- escapes ---------------------------------------------------------------------------------------

HOSTILE_IDS = ["..", "../outside", "../../outside", "/tmp/outside", "a/../../outside",
               "..\\outside", "a\x00b", "x" * 300, ".", "", " ", "sessions", ".git",
               "a/b", "~/outside", "%2e%2e/outside", "\u2024\u2024/outside", "CON", "a\nb"]


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(root.rglob("*")) if not p.is_symlink()}


def escapes(root: Path) -> list[dict]:
    """Hostile ids at each entry point, then symlinks where we write, then broken .git."""
    box = root / "box"
    home, outside = box / "home", box / "outside"
    outside.mkdir(parents=True)
    (outside / "keep.txt").write_text("not yours\n")
    store = SessionStore(home / "sessions")
    store.create_session("s", title="t")
    store.append_message("s", {"id": "u1", "role": "user", "content": "Book the ferry."})
    ws = Workspace(home / "memory")
    entry_points: dict[str, Callable[[str], object]] = {
        "session id (session new)": lambda i: store.create_session(i, title="t"),
        "node id (session add)": lambda i: store.append_message(
            "s", {"id": i, "role": "user", "content": "x"}),
        "session id (session add)": lambda i: store.append_message(
            i, {"id": "n9", "role": "user", "content": "x"}),
        "source id (memory follow)": lambda i: follow(ws, f"openprogram/{i}/n1"),
        "topic path (memory show)": lambda i: show(ws, f"{i}.md"),
    }
    rows = []
    for name, call in entry_points.items():
        tried = escaped = 0
        for hostile in HOSTILE_IDS:
            before = snapshot(box)
            try:
                call(hostile)
            except ScriptoriumError:
                pass
            tried += 1
            after = snapshot(box)
            stray = [p for p in after if not p.startswith("home/") and after[p] != before.get(p)]
            escaped += bool(stray)
        rows.append({"escape": f"hostile ids: {name}", "tried": tried, "escaped": escaped})
    rows.append(symlink_escapes(root / "links"))
    rows.append(git_escapes(root / "git"))
    return rows


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scriptorium", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=300)


def fresh_home(box: Path) -> Path:
    home = box / "home"
    cli(home, "session", "new", "--id", "s")
    cli(home, "session", "add", "s", "--role", "user", "--text", "Book the ferry to Lisbon.")
    cli(home, "memory", "write", "s", "--force")
    cli(home, "session", "add", "s", "--role", "assistant", "--text", "Ferry booked.")
    return home


# every path the store and the workspace write, and the command that writes it
LINKED = [("sessions/s/history", "session add"), ("sessions/s/meta.json", "session add"),
          ("sessions/s/.session.lock", "session add"), ("sessions/s", "session add"),
          ("memory/topics", "memory write"), ("memory/sources", "memory write"),
          ("memory/.scriptorium", "memory write"),
          ("memory/.scriptorium/runtime.json", "memory write"),
          ("memory/.scriptorium/write.lock", "memory write"),
          ("memory/.scriptorium/search.sqlite", "memory search")]
COMMANDS = {"session add": ["session", "add", "s", "--role", "user", "--text", "And a hotel."],
            "memory write": ["memory", "write", "s", "--force"],
            "memory search": ["memory", "search", "ferry"]}


def symlink_escapes(root: Path) -> dict:
    tried = escaped = 0
    for rel, command in LINKED:
        box = root / f"case{tried}"
        home = fresh_home(box)
        target = box / "outside"
        path = home / rel
        if path.is_dir():
            shutil.copytree(path, target, symlinks=True)
            shutil.rmtree(path)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target) if path.exists() else target.write_text("")
            path.unlink(missing_ok=True)
        path.symlink_to(target, target_is_directory=target.is_dir())
        before = snapshot(target) if target.is_dir() else {"": target.read_bytes()}
        cli(home, *COMMANDS[command])
        after = snapshot(target) if target.is_dir() else {"": target.read_bytes()}
        tried += 1
        escaped += before != after
    return {"escape": "symlinks where we write (then the command that writes there)",
            "tried": tried, "escaped": escaped}


def git_escapes(root: Path) -> dict:
    """A `.git` that is not a repository, in a home inside another repository."""
    kinds = {"empty .git dir": lambda g: g.mkdir(),
             "half-made .git (config only)": lambda g: (g.mkdir(), (g / "config").write_text(
                 "[core]\n\trepositoryformatversion = 0\n")),
             ".git is a file": lambda g: g.write_text("gitdir: ../../..\n"),
             ".git with a dangling HEAD": lambda g: (g.mkdir(), (g / "HEAD").write_text(
                 "ref: refs/heads/main\n"))}
    tried = escaped = 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    for where in ("sessions/s", "memory"):
        for name, make in kinds.items():
            outer = root / f"case{tried}"
            outer.mkdir(parents=True)
            for args in (["init", "-q"], ["config", "user.email", "t@t"],
                         ["config", "user.name", "t"]):
                subprocess.run(["git", *args], cwd=outer, env=env, check=True)
            (outer / "mine.txt").write_text("mine\n")
            subprocess.run(["git", "add", "mine.txt"], cwd=outer, env=env, check=True)
            subprocess.run(["git", "commit", "-qm", "outer"], cwd=outer, env=env, check=True)
            home = fresh_home(outer)
            shutil.rmtree(home / where / ".git", ignore_errors=True)
            make(home / where / ".git")
            cli(home, *COMMANDS["session add" if where.startswith("sessions") else
                                "memory write"])
            log = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=outer, env=env,
                                 capture_output=True, text=True).stdout.strip()
            staged = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=outer,
                                    env=env, capture_output=True, text=True).stdout.strip()
            tried += 1
            escaped += log != "1" or staged != ""
    return {"escape": "a .git that is not a repository, home inside another repository",
            "tried": tried, "escaped": escaped}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n = int(os.environ.get("SCRIPTORIUM_FUZZ_INPUTS", "1000"))
    seed = int(os.environ.get("SCRIPTORIUM_FAULT_SEED", "1"))
    load = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="scriptorium-fuzz-") as tmp:
        fuzzed = fuzz(n, seed, Path(tmp) / "fuzz")
        tried = escapes(Path(tmp) / "escapes")
    data = {"inputs_per_parser": n, "seed": seed, "fuzz": fuzzed, "escapes": tried,
            "load_before": [round(x, 1) for x in load],
            "load_after": [round(x, 1) for x in os.getloadavg()],
            "seconds": round(time.monotonic() - started, 1)}
    if args.json:
        print(json.dumps(data))
    else:
        print(f"fuzzing, seed {seed}, {n} inputs per parser, load {data['load_before'][0]} -> "
              f"{data['load_after'][0]}, {data['seconds']} s")
        print(f"| {'parser':42} | inputs | accepted | refused | crashed |")
        print(f"|{'-' * 44}|--------|----------|---------|---------|")
        for r in fuzzed:
            print(f"| {r['parser']:42} | {r['inputs']:6} | {r['accepted']:8} | {r['refused']:7} "
                  f"| {r['crashed']:7} |")
            for example in r["examples"]:
                print(f"|   crash: {example}")
        print(f"\n| {'escape tried':66} | tried | escaped |")
        print(f"|{'-' * 68}|-------|---------|")
        for r in tried:
            print(f"| {r['escape']:66} | {r['tried']:5} | {r['escaped']:7} |")
    bad = sum(r["crashed"] for r in fuzzed) + sum(r["escaped"] for r in tried)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
