"""Builders shared by the migration and backfill tests: legacy/v2 archive files, sessions,
legacy runtime.json, and a byte digest of a whole tree."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from click.testing import CliRunner

from scriptorium.memory.records import MARK_KEY
from scriptorium.memory.sources import SourceRecord, pct_encode, render_v2_file, source_anchor


def legacy_header(session: str, node: str, provider: str = "openprogram") -> str:
    sid = f"{provider}/{session}/{node}"
    return f'<a id="{source_anchor(sid)}"></a>\n<!-- source-id:{sid} -->\n'


def legacy_text(session: str, rows: list[tuple[str, str]], title: str | None = None) -> str:
    """A legacy archive as the old runtime wrote it: title, then header + record per row."""
    out = f"# {session if title is None else title}\n\n"
    for node, content in rows:
        out += legacy_header(session, node) + f"[2026-01-02T10:00:00+00:00] user: {content}\n\n"
    return out


def write_legacy(memory_root: Path, session: str, text: str, stem: str | None = None) -> Path:
    path = memory_root / "sources" / "openprogram" / f"{pct_encode(session) if stem is None else stem}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    return path


def v2_text(session: str, rows: list[tuple[str, str]], provider: str = "openprogram",
            trust: str = "trusted") -> str:
    meta = {"authority_tier": None, "principal_id": "unknown", "speaker_kind": "unknown",
            "trust_state": trust, "version": 1}
    return render_v2_file([SourceRecord(provider, session, node, "user", content,
                                        "2026-01-02T10:00:00+00:00", meta=meta)
                           for node, content in rows])


def write_v2(memory_root: Path, session: str, text: str, provider: str = "openprogram") -> Path:
    path = memory_root / "sources" / pct_encode(provider) / "_v2" / f"{pct_encode(session)}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    return path


def set_cursors(memory_root: Path, cursors: dict | None = None, **counters) -> Path:
    """runtime.json of an old position-cursor installation."""
    path = memory_root / ".scriptorium" / "runtime.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"cursors": cursors if cursors is not None else {}, **counters}
    path.write_text(json.dumps(data))
    return path


def chain(store, sid: str, names: list[str], after: str | None = None, **extra) -> None:
    """Append alternating user/assistant turns ``names`` after ``after`` (default: the head)."""
    if not store.exists(sid):
        store.create_session(sid)
    prev = after
    for i, name in enumerate(names):
        msg = {"id": name, "role": "user" if i % 2 == 0 else "assistant",
               "content": f"turn {name} says something about {name}", **extra}
        if prev is not None:
            msg["predecessor"] = prev
        store.append_message(sid, msg)
        prev = name


def marked(store, sid: str, workspace_id: str) -> set[str]:
    return {n.id for n in store.get_nodes(sid) if n.metadata.get(MARK_KEY) == workspace_id}


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (git internals included) with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for name, data in tree_bytes(root).items():
        h.update(name.encode() + b"\0" + data + b"\0")
    return h.hexdigest()


def run(home: Path, *args: str):
    """``scriptorium --home HOME args…`` in-process (stdout and stderr kept apart)."""
    from scriptorium.cli import main

    return CliRunner().invoke(main, ["--home", str(home), *args], catch_exceptions=False)


def run_json(home: Path, *args: str) -> tuple[int, dict]:
    result = run(home, *args, "--json")
    return result.exit_code, json.loads(result.stdout)


def cite_archive(memory_root: Path, topic: str = "legacy-archive.md") -> Path:
    """A topic citing every frame the archive holds, as an old runtime's completed writes
    left it: migration trusts only archived turns that a topic cites."""
    from scriptorium.memory.sources import SourceArchive

    blocks, n = [], 0
    for frame in SourceArchive(memory_root).iter_frames():
        n += 1
        blocks.append(f"Turn {frame.source_id} was written.[^e-{n:010x}] ^b{n:07x}\n\n"
                      f"[^e-{n:010x}]: Time: `undated`; Sources: [turn](../{frame.path}"
                      f"#{frame.anchor})\n")
    path = memory_root / "topics" / topic
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Legacy archive\n\n" + "\n".join(blocks) if blocks else "# Legacy\n")
    return path
