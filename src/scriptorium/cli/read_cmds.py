"""``scriptorium memory search``, ``memory follow`` and ``memory reorganize``: reading memory
back and tidying it, from the shell."""

from __future__ import annotations

from typing import Any

import click

from .app import App, command, memory, output


def _human_hits(data: dict[str, Any]) -> str:
    if not data["hits"]:
        return "no matches"
    lines = []
    for hit in data["hits"]:
        where = f"{hit['path']}#^{hit['block_id']}" if hit.get("block_id") else \
            f"{hit['path']} ({hit.get('source_id')})"
        when = f" [{', '.join(hit['dates'])}]" if hit.get("dates") else ""
        branch = ""
        if "branch" in hit:
            note = f": {hit['branch_note']}" if hit.get("branch_note") else ""
            branch = f"  ({hit['branch']}{note})"
        lines.append(f"{hit['score']:.4g}  {where}{when}{branch}\n    {hit['text']}")
        if hit["kind"] == "claim" and hit["sources"]:
            lines.append("    cites: " + ", ".join(hit["sources"]))
    return "\n".join(lines)


@command(memory, "search")
@click.argument("query")
@click.option("--top-k", type=int, default=5, show_default=True, help="How many hits.")
@click.option("--path", "path_prefix", default=None,
              help="Only under this folder or file (relative to topics/, or sources/...).")
@click.option("--since", default=None, help="Evidence dated on or after YYYY[-MM[-DD]].")
@click.option("--until", default=None, help="Evidence dated on or before YYYY[-MM[-DD]].")
@click.option("--speaker", default=None,
              help="What this speaker said: claims citing their turns, and with --sources the "
                   "turns themselves (id, name or label, any case).")
@click.option("--sources", "include_sources", is_flag=True,
              help="Also search the archived turns themselves.")
@click.option("--method", type=click.Choice(["bm25", "embedding", "hybrid"]), default="bm25",
              show_default=True,
              help="embedding/hybrid need a local embedding model (optional extra).")
@click.option("--session", default=None,
              help="Read as a reader in this conversation: each hit says on_line, "
                   "alternative (another branch, with its fork point) or elsewhere; "
                   "alternatives rank below hits on the reader's line.")
@click.option("--head", default=None, help="The reader's tip in --session (default: its head).")
def search_cmd(app: App, query: str, top_k: int, path_prefix: str | None, since: str | None,
               until: str | None, speaker: str | None, include_sources: bool,
               method: str, session: str | None, head: str | None) -> None:
    """Search memory for QUERY: topic claims (and, with --sources, archived turns)."""
    hits = app.memory(create=False).search(
        query, top_k=top_k, path_prefix=path_prefix, since=since, until=until, speaker=speaker,
        include_sources=include_sources, method=method, session=session, head=head)
    output(app, {"hits": [h.to_dict() for h in hits]}, _human_hits)


@command(memory, "follow")
@click.argument("source_id")
def follow_cmd(app: App, source_id: str) -> None:
    """Where SOURCE_ID (a source a hit cites) came from: its session and turn."""
    app.require_home()
    # reading the archive needs no layout, lock, history or crash recovery
    data = app.memory(create=False, recover=False).follow(source_id)

    def human(d: dict[str, Any]) -> str:  # an unarchived source is NotFound (exit 3)
        head = (f"session {d['session_id']}, turn {d['node_id']}" if d["session_id"]
                else f"{d['provider']} {d['thread']}/{d['message']}")
        return f"{head}\n{d['timestamp']} {d['label']}: {d['content']}"

    output(app, data, human)


@command(memory, "reorganize")
@click.option("--writer", type=click.Choice(["embedded", "llm"]), default="embedded",
              show_default=True,
              help="embedded: deterministic near-duplicate merging; llm: the configured model.")
def reorganize_cmd(app: App, writer: str) -> None:
    """Merge paragraphs that say the same thing (every id and citation kept). Refuses a
    result that would drop more than a quarter of the blocks."""
    report = app.memory().reorganize(writer)

    def human(d: dict[str, Any]) -> str:
        lines = [f"reorganize ({d['writer']}): {d['status']}, {d['before_blocks']} -> "
                 f"{d['after_blocks']} paragraph(s)"]
        for group in d["merged"]:
            lines.append(f"  merged into ^{group['kept']} ({group['path']}): " +
                         ", ".join("^" + a for a in group["aliases"]))
        for path in d["changed_files"]:
            lines.append(f"  changed {path}")
        if d["dropped"]:
            lines.append("  no longer resolving: " + ", ".join("^" + i for i in d["dropped"]))
        for path in d["skipped"]:
            lines.append(f"  left alone (does not parse): {path}")
        return "\n".join(lines)

    output(app, report.to_dict(), human)


@command(memory, "context")
@click.argument("session_id")
@click.option("--head", default=None, help="The branch tip to read at (default: the head).")
@click.option("--budget", type=int, default=None,
              help="Token budget of the block (default 800; offline token count).")
def context_cmd(app: App, session_id: str, head: str | None, budget: int | None) -> None:
    """The memory a model on that branch should see now, as one Markdown block: claims
    relevant to its recent turns, on-line first, alternatives labelled, each with its id."""
    ctx = app.memory().context(session_id, head, budget=budget)
    output(app, ctx.to_dict(), lambda d: d["markdown"].rstrip("\n"))
