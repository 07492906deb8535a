"""``scriptorium demo``: a branching session written to memory, explained.

Builds one conversation with a retried reply, an edited earlier message and a sub-agent in a
temporary home, runs the session-boundary write, and reports what each branch contributed,
where it landed, what is still pending and why, and what a branch-aware search finds for a
reader on the head and on the abandoned line. It runs offline with the default settings
(the home's config.toml and SCRIPTORIUM_* variables are honoured and printed).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import load_settings
from .memory.citations import citation_map
from .memory.search import search
from .memory.writing import Memory
from .sessions import SessionStore

SESSION = "lisbon-offsite"
DEMO_QUERY = "Dana dinner peanuts vegetarian"


@dataclass
class DemoReport:
    home: Path
    session_id: str
    workspace_id: str
    branches: list[dict[str, Any]] = field(default_factory=list)
    topics: dict[str, str] = field(default_factory=dict)
    search: dict[str, Any] | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    pending: list[dict[str, Any]] = field(default_factory=list)
    readers: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"home": str(self.home), "session_id": self.session_id,
                "workspace_id": self.workspace_id, "settings": self.settings,
                "branches": self.branches, "pending": self.pending,
                "topics": sorted(self.topics), "search": self.search,
                "readers": self.readers}


def build_session(store: SessionStore) -> dict[str, str]:
    """The demo conversation; returns a name → node id map."""
    store.create_session(SESSION, title="Lisbon offsite")
    n: dict[str, str] = {}

    def say(name: str, role: str, text: str, after: str | None = None) -> None:
        msg: dict[str, Any] = {"id": name, "role": role, "content": text}
        if after is not None:
            msg["predecessor"] = after
        n[name] = store.append_message(SESSION, msg)

    say("u1", "user", "We are planning the team offsite in Lisbon for the first week of May.")
    say("a1", "assistant", "Noted: Lisbon, first week of May. What is the budget?")
    say("u2", "user", "The budget is fifty thousand euros for twelve people.")
    say("a2", "assistant", "That is about 4,170 euros per person; I will keep flights under "
                           "600 euros each.")
    n["a2-retry"] = store.retry(SESSION, "a2", "Roughly 4,200 euros each.",
                                node_id="a2-retry")
    store.set_head(SESSION, "a2")  # the user keeps the first answer and goes on
    say("u3", "user", "Dana is allergic to peanuts, keep that in mind for every dinner.")
    say("a3", "assistant", "Understood: peanut-free menus for Dana at every dinner.")
    n["u3-edit"] = store.edit(SESSION, "u3", "Correction: Dana is vegetarian, not allergic "
                                             "to peanuts.", node_id="u3-edit")
    say("a3-edit", "assistant", "Got it: vegetarian menus for Dana at every dinner.")
    n["sub-root"] = store.spawn(SESSION, "a3-edit", "Find three vegetarian restaurants near "
                                                    "Alfama.", node_id="sub-root")
    say("sub-1", "assistant", "Found three vegetarian restaurants near Alfama: Taberna Alma, "
                              "Casa Verde and Tasca do Bairro.", after="sub-root")
    store.set_head(SESSION, "a3-edit")
    say("u4", "user", "Which hotel has a meeting room for the whole team?")
    say("a4", "assistant", "The Alfama Grand hotel has a meeting room for 14; I will hold it "
                           "until Friday.")
    return n


def run_demo(home: Path | None = None) -> DemoReport:
    """Build, write and explain the demo in ``home`` (default: a new temporary directory)."""
    home = Path(home) if home else Path(tempfile.mkdtemp(prefix="scriptorium-demo-"))
    settings = load_settings(home)
    memory = Memory(home, settings=settings)
    build_session(memory.store)
    before = {row["tip"]: [m["id"] for m in memory.store.get_branch(SESSION, row["tip"])]
              for row in memory.store.list_branches(SESSION)}
    result = memory.write_session(SESSION)
    landed = citation_map(memory.workspace)
    report = DemoReport(home=home, session_id=SESSION, workspace_id=memory.workspace_id,
                        settings={"trigger_tokens": settings.trigger_tokens,
                                  "side_branches": settings.side_branches,
                                  "writer": settings.writer_kind})
    report.pending = [p.to_dict() for p in memory.still_pending(SESSION)]
    waiting = {p["tip"]: p for p in report.pending}
    head = memory.store.head(SESSION)
    for row in memory.store.list_branches(SESSION):
        tip = row["tip"]
        contributed = [node for step in result.steps if step.tip == tip for node in step.marked]
        pending = waiting.get(tip, {})
        report.branches.append({
            "tip": tip, "head": tip == head, "turns": before.get(tip, []),
            "contributed": contributed, "pending": pending.get("pending_ids", []),
            "pending_reason": pending.get("reason"),
            "landed": sorted({f"{path}#^{block}" for node in contributed
                              for path, block in landed.get(f"openprogram/{SESSION}/{node}", [])}),
        })
    for path in sorted((memory.workspace.root / "topics").rglob("*.md")):
        report.topics[path.relative_to(memory.workspace.root).as_posix()] = path.read_text()
    hits = search(memory.workspace, DEMO_QUERY, top_k=3)
    report.search = {"query": DEMO_QUERY, "hits": [h.to_dict() for h in hits]}
    for tip in (head, "a3"):
        hits = memory.search(DEMO_QUERY, top_k=3, session=SESSION, head=tip)
        report.readers.append({"head": tip, "hits": [h.to_dict() for h in hits]})
    return report


def render_report(report: DemoReport) -> str:
    """The short, readable text ``scriptorium demo`` prints."""
    opts = ", ".join(f"{k} = {v}" for k, v in report.settings.items())
    lines = [f"scriptorium demo — home {report.home}",
             f"session {report.session_id!r}, memory workspace {report.workspace_id}",
             f"settings: {opts} (the defaults unless config.toml or SCRIPTORIUM_* say so)", "",
             "Branches (every live tip) and what each contributed to memory:"]
    for b in report.branches:
        label = "head" if b["head"] else "branch"
        lines.append(f"  [{label}] tip {b['tip']}: {len(b['turns'])} turns on the branch")
        lines.append(f"      written by this branch: {', '.join(b['contributed']) or '—'}")
        if b["pending"]:
            why = PENDING_WHY.get(b["pending_reason"], b["pending_reason"])
            lines.append(f"      still pending ({why}): {', '.join(b['pending'])}")
        for where in b["landed"]:
            lines.append(f"      landed in {where}")
    lines.append("")
    lines.append("Shared turns were written once: each branch's walk stopped at the marks the "
                 "branches before it left.")
    for path, text in report.topics.items():
        lines += ["", f"--- {path} ---", text.rstrip()]
    if report.search:
        lines += ["", f"search {report.search['query']!r}:"]
        for hit in report.search["hits"]:
            lines.append(f"  {hit.get('score', 0):.3f} {hit.get('path')}#^{hit.get('block_id')}: "
                         f"{str(hit.get('text', ''))[:100]}")
    for reader in report.readers:
        lines += ["", f"the same search for a reader on the branch at {reader['head']} "
                      f"(--session {report.session_id} --head {reader['head']}):"]
        for hit in reader["hits"]:
            note = f": {hit['branch_note']}" if hit.get("branch_note") else ""
            lines.append(f"  [{hit['branch']}{note}] ^{hit.get('block_id')}: "
                         f"{str(hit.get('text', ''))[:90]}")
    return "\n".join(lines)


PENDING_WHY = {"rejected_reply": "a retried reply only: a rejected reply waits for the "
               "threshold", "below_threshold": "below the threshold, waits",
               "failure": "the write failed", "archived_branch": "archived"}
