"""``scriptorium session …`` commands (thin wrappers over scriptorium.sessions).

Every command is one library call; library errors become one stderr line and the error's
exit code (2 bad input, 3 not found, 4 corrupt file, 5 busy). Commands other than ``new``
and ``list`` require the session to exist.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

import click

from ..errors import InvalidInput
from .app import App, command, output, session


def text_input(what: str) -> Callable:
    """Add ``--text TEXT`` (``-`` reads standard input) and ``--text-file PATH`` to a command;
    it receives ``text``, refused when missing, given twice, unreadable or blank."""

    def decorate(fn: Callable) -> Callable:
        @click.option("--text", "text", default=None,
                      help=f"{what[0].upper()}{what[1:]} (`-` reads standard input).")
        @click.option("--text-file", type=click.Path(dir_okay=False, path_type=Path),
                      default=None, help=f"Read {what} from this UTF-8 file.")
        @functools.wraps(fn)
        def wrapper(*args: Any, text: str | None, text_file: Path | None, **kw: Any) -> Any:
            return fn(*args, text=read_text(text, text_file, what), **kw)

        return wrapper

    return decorate


def read_text(text: str | None, text_file: Path | None, what: str) -> str:
    """The text of ``--text``/``--text-file``: exactly one, valid UTF-8, not blank."""
    if (text is None) == (text_file is None):
        raise InvalidInput(f"give {what} with exactly one of --text or --text-file")
    if text_file is not None:
        try:
            text = text_file.read_bytes().decode("utf-8")
        except OSError as exc:
            raise InvalidInput(f"cannot read --text-file {text_file}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise InvalidInput(f"--text-file {text_file} is not valid UTF-8") from None
    elif text == "-":
        data = click.get_binary_stream("stdin").read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput("standard input is not valid UTF-8") from None
    assert text is not None
    if not text.strip():
        raise InvalidInput(f"{what} is empty or only whitespace")
    return text


def _short(text: Any, width: int = 70) -> str:
    s = text if isinstance(text, str) else str(text)
    s = " ".join(s.split())
    return s if len(s) <= width else s[: width - 1] + "…"


def _messages_human(data: dict) -> str:
    lines = [f"session {data['session_id']}  head {data['head_id']}"]
    for m in data["messages"]:
        lines.append(f"  {m['id']:<14} {m['role']:<9} {_short(m['content'])}")
    return "\n".join(lines)


@command(session, "new")
@click.option("--id", "sid", default=None, help="Session id (default: 12 random hex).")
@click.option("--title", default="", help="Session title.")
def new_cmd(app: App, sid: str | None, title: str) -> None:
    """Create a session (an existing id is left as it is)."""
    created = app.store().create_session(sid, title=title)
    output(app, {"session_id": created}, lambda d: d["session_id"])


@command(session, "add")
@click.argument("sid")
@click.option("--role", type=click.Choice(["user", "assistant"]), required=True)
@text_input("the message text")
@click.option("--id", "node_id", default=None, help="Node id (default: 12 random hex).")
@click.option("--after", default=None,
              help="Fork: the new node follows NODE (not the head) and becomes the head.")
def add_cmd(app: App, sid: str, role: str, text: str, node_id: str | None,
            after: str | None) -> None:
    """Append a message to an existing session SID (default: after the head)."""
    msg: dict[str, Any] = {"role": role, "content": text}
    if node_id is not None:
        msg["id"] = node_id
    added = app.store().add(sid, msg, after=after)
    data: dict[str, Any] = {"node_id": added.node_id, "head_id": added.head_id}
    if not added.created:
        data["created"] = False
        data["note"] = f"node {added.node_id} is already stored with this text; nothing added"
    if added.warnings:
        data["warnings"] = added.warnings
    output(app, data, _added_human)


def _added_human(d: dict) -> str:
    lines = [f"{d['node_id']} (head {d['head_id']})"]
    lines += [d["note"]] if "note" in d else []
    return "\n".join(lines)


@command(session, "show")
@click.argument("sid")
@click.option("--head", "head", default=None, help="Show the branch ending at NODE.")
def show_cmd(app: App, sid: str, head: str | None) -> None:
    """Show one branch of SID (default: the head's), oldest first."""
    data = app.store().branch_view(sid, head)
    output(app, data, _messages_human)


@command(session, "branches")
@click.argument("sid")
def branches_cmd(app: App, sid: str) -> None:
    """List the live branch tips of SID (the head first)."""
    rows = app.store().list_branches(sid)
    data = {"session_id": sid, "branches": rows}

    def human(d: dict) -> str:
        return "\n".join(f"{'*' if r['head'] else ' '} {r['tip']}"
                         f"{'  [archived]' if r['archived'] else ''}"
                         f"{'  ' + r['name'] if r['name'] else ''}" for r in d["branches"])

    output(app, data, human)


@command(session, "head")
@click.argument("sid")
@click.argument("node", required=False)
def head_cmd(app: App, sid: str, node: str | None) -> None:
    """Print the head of SID, or move it to NODE."""
    store = app.store()
    if node is None:
        data = {"session_id": sid, "head_id": store.head(sid)}
    else:
        previous = store.head(sid)
        store.set_head(sid, node)
        data = {"session_id": sid, "head_id": node, "previous_head_id": previous}
    output(app, data, lambda d: str(d["head_id"]))


@command(session, "rewind")
@click.argument("sid")
@click.argument("node")
def rewind_cmd(app: App, sid: str, node: str) -> None:
    """Rewind SID to before NODE (on the active chain): those turns are retired."""
    result = app.store().rewind(sid, node)
    data = {"session_id": sid, **result}
    output(app, data, lambda d: f"head {d['new_head_id']}; rewound {len(d['nodes_rewound'])}")


@command(session, "spawn")
@click.argument("sid")
@click.option("--caller", required=True, help="The node that spawns the sub-agent.")
@text_input("the sub-agent's first message")
@click.option("--id", "node_id", default=None)
@click.option("--caller-session", default=None,
              help="The caller lives in this other session (cross-session spawn).")
@click.option("--register-head", is_flag=True, help="Make the spawn root the head.")
def spawn_cmd(app: App, sid: str, caller: str, text: str, node_id: str | None,
              caller_session: str | None, register_head: bool) -> None:
    """Open a spawn branch in SID hung on CALLER."""
    nid = app.store().spawn(sid, caller, text, node_id=node_id, register_head=register_head,
                            caller_session=caller_session)
    output(app, {"node_id": nid}, lambda d: d["node_id"])


@command(session, "retry")
@click.argument("sid")
@click.argument("reply")
@text_input("the new reply")
@click.option("--id", "node_id", default=None)
def retry_cmd(app: App, sid: str, reply: str, text: str, node_id: str | None) -> None:
    """Add a new sibling of assistant reply REPLY; it becomes the head."""
    nid = app.store().retry(sid, reply, text, node_id=node_id)
    output(app, {"node_id": nid, "head_id": nid}, lambda d: d["node_id"])


@command(session, "edit")
@click.argument("sid")
@click.argument("node")
@text_input("the edited user message")
@click.option("--id", "node_id", default=None)
def edit_cmd(app: App, sid: str, node: str, text: str, node_id: str | None) -> None:
    """Add an edited sibling of user message NODE; it becomes the head."""
    nid = app.store().edit(sid, node, text, node_id=node_id)
    output(app, {"node_id": nid, "head_id": nid}, lambda d: d["node_id"])


@command(session, "compact")
@click.argument("sid")
@click.option("--covers", "covers", multiple=True, required=True,
              help="A covered node id, in chain order (repeat the option).")
@text_input("the summary text")
@click.option("--id", "node_id", default=None)
def compact_cmd(app: App, sid: str, covers: tuple[str, ...], text: str,
                node_id: str | None) -> None:
    """Add a compaction summary of a contiguous chain segment (the head does not move)."""
    nid = app.store().compact(sid, list(covers), text, node_id=node_id)
    output(app, {"node_id": nid}, lambda d: d["node_id"])


@command(session, "list")
def list_cmd(app: App) -> None:
    """List sessions, most recently active first."""
    rows = app.store().list_sessions()
    output(app, {"sessions": rows},
           lambda d: "\n".join(f"{r['session_id']:<20} {r['head_id'] or '-':<14} {r['title']}"
                               for r in d["sessions"]))
