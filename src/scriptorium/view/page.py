"""One self-contained HTML page per session: the template, its CSS and JS inlined, the model
embedded as JSON. Nothing is fetched when the page opens (no CDN, no server, no network)."""

from __future__ import annotations

import html
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput
from ..fsutil import atomic_write_text
from .model import session_model

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.writing import Memory

ASSETS = "assets"


@lru_cache(maxsize=None)
def asset(name: str) -> str:
    """A packaged template, stylesheet or script (package data)."""
    return resources.files(__package__).joinpath(ASSETS, name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``</script>``, no comment
    openers, no HTML entities can end or bend the element."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_page(model: dict[str, Any], *, index_href: str = "") -> str:
    """The page for one session model. ``index_href``: a link back to the session index
    (serve mode), empty for a page opened from disk."""
    session = model["session"]
    title = session["title"] or session["id"]
    back = (f'<a class="back" href="{html.escape(index_href)}">All sessions</a>'
            if index_href else "")
    return (asset("page.html")
            .replace("{{TITLE}}", html.escape(f"{title} — scriptorium view"))
            .replace("{{BACK}}", back)
            .replace("/*{{CSS}}*/", asset("view.css"))
            .replace("/*{{JS}}*/", asset("view.js"))
            .replace("{{MODEL}}", embed_json(model)))


def write_page(memory: "Memory", session_id: str, path: Path | str) -> dict[str, Any]:
    """Write the page of ``session_id`` to ``path`` atomically (a whole page or nothing).
    A symlink or a directory at ``path`` is refused, never written through."""
    target = Path(path)
    if target.is_symlink():
        raise InvalidInput(f"refusing to write the page through a symlink: {target}")
    if target.is_dir():
        raise InvalidInput(f"output path is a directory: {target}")
    if not target.parent.is_dir():
        raise InvalidInput(f"output directory does not exist: {target.parent}")
    model = session_model(memory, session_id)
    page = render_page(model)
    atomic_write_text(target, page, 0o644)
    return {"session_id": session_id, "path": str(target), "nodes": len(model["nodes"]),
            "bytes": len(page.encode("utf-8")), "counts": model["counts"]}
