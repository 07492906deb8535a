"""``scriptorium view`` figures: page generation and in-browser render time at 100 / 1,000 /
10,000 nodes, beside a baseline page that draws every node at once.

Each session is a branching conversation written straight to disk (appending 10,000 turns one
by one would benchmark the append path): a main line of user/assistant turns with a retried
reply every 20 turns, an edit followed by 4 turns every 50, a sub-agent of 3 turns every 80, a
tool row every 10 replies and a runtime notice every 100. Memory is then written by the real
write path (embedded writer, 400-turn batches) up to the newest 10 head turns, so marks and
citations are real; those 10 and the short side lines (below the threshold) stay pending.

* generation: ``session_model`` + ``render_page`` in Python (what ``scriptorium view`` costs);
* render: headless Chromium (the system package) opens the file; ``performance.now()`` when the
  first full draw has been painted (navigation start = 0: includes HTML parse, JSON parse,
  layout and drawing);
* baseline: the same model drawn the straightforward way (every node a row and an SVG glyph,
  nothing collapsed, nothing virtualised), timed the same way;
* before anything is written: why-pending for every live tip (each walk reaches the first
  turn), ours vs one ``Memory.pending`` walk per tip (the answers are asserted equal).

Run:  python benchmarks/bench_view.py [--sizes 100,1000,10000] [--rounds 3]
Screenshots go to benchmarks/out/ (gitignored).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from scriptorium.config import load_settings
from scriptorium.memory.pending_reasons import pending_by_tip
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore
from scriptorium.view import render_page, session_model
from scriptorium.view.page import embed_json

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
OUT = Path(__file__).resolve().parent / "out"
SID = "big"
T0 = 1_700_000_000.0

BASELINE = """<!DOCTYPE html><html><head><meta charset="utf-8"><style>
body{font:14px system-ui;margin:0} .r{height:28px;display:flex;align-items:center;gap:6px;
white-space:nowrap;overflow:hidden} svg{position:absolute;left:0;top:0}</style></head><body>
<div id="g" style="position:relative"></div>
<script type="application/json" id="model">MODEL</script><script>
const M = JSON.parse(document.getElementById('model').textContent), N = M.nodes;
const g = document.getElementById('g'), NS = 'http://www.w3.org/2000/svg';
const svg = document.createElementNS(NS, 'svg'); svg.setAttribute('width', 40);
svg.setAttribute('height', N.length * 28); g.appendChild(svg);
const col = {written:'#1a7f37', pending:'#bc4c00', tool:'#59636e', runtime:'#8250df',
             summary:'#0969da', other:'#6e7781'};
N.forEach((n, i) => {
  const c = document.createElementNS(NS, 'circle'); c.setAttribute('cx', 16);
  c.setAttribute('cy', i * 28 + 14); c.setAttribute('r', 7); c.setAttribute('fill', col[n.state]);
  svg.appendChild(c);
  if (n.parent >= 0) { const l = document.createElementNS(NS, 'path');
    l.setAttribute('d', 'M16 ' + (n.parent * 28 + 14) + 'V' + (i * 28 + 14));
    l.setAttribute('stroke', '#8c959f'); svg.appendChild(l); }
  const r = document.createElement('div'); r.className = 'r'; r.style.paddingLeft = '40px';
  r.textContent = n.role + ' ' + n.text.slice(0, 160); g.appendChild(r);
});
requestAnimationFrame(() => setTimeout(() => { window.__viewReady = performance.now();
  document.body.dataset.ready = '1'; }, 0));
</script></body></html>"""


def grow(home: Path, n: int) -> None:
    """Write an ``n``-node branching session straight to disk."""
    hist = home / "sessions" / SID / "history"
    hist.mkdir(parents=True)
    nodes: list[dict] = []

    def add(role: str, text: str, pred: str | None, caller: str = "", **md) -> str:
        seq = len(nodes)
        node = {"id": f"n{seq}", "created_at": T0 + seq, "seq": seq, "role": role,
                "name": "", "input": None, "output": text, "caller": caller,
                "predecessor": pred, "reads": [], "metadata": md}
        nodes.append(node)
        return node["id"]

    head, turn = "ROOT", 0
    while len(nodes) < n:  # whole turns: the session ends up a few nodes over n
        turn += 1
        before = head
        user = add("user", f"Question {turn}: what about the deploy window for service "
                           f"{turn % 37}? It moved to Tuesday {turn % 28 + 1}.", before)
        reply = add("llm", f"Answer {turn}: service {turn % 37} deploys on Tuesday "
                           f"{turn % 28 + 1}; I will tell the on-call team.", user)
        head = reply
        if turn % 10 == 0:
            add("code", f"calendar entry {turn} created", None, caller=reply)
        if turn % 20 == 0:
            add("llm", f"Retried answer {turn}.", user, forked_from=reply)
        if turn % 50 == 0:
            prev = add("user", f"Edited question {turn}: and the database?", before,
                       forked_from=user, edit_of=user)
            for k in range(4):
                prev = add("llm" if k % 2 == 0 else "user", f"Side line {turn}.{k}", prev)
        if turn % 80 == 0:
            prev = add("user", f"Sub-agent task {turn}: check the runbook.", None, caller=reply,
                       source="agent_spawn", spawn_branch_root=True)
            for k in range(3):
                prev = add("llm", f"Sub-agent step {turn}.{k}", prev)
        if turn % 100 == 0:
            head = add("user", f"[runtime] job {turn} finished", head, display="runtime")
    letter = {"user": "u", "llm": "l", "code": "c"}
    for node in nodes:
        name = f"{node['seq']:08d}-{letter[node['role']]}-{node['id']}.json"
        (hist / name).write_text(json.dumps(node))
    (home / "sessions" / SID / "meta.json").write_text(json.dumps(
        {"id": SID, "title": f"Deploys ({len(nodes)} nodes)", "head_id": head,
         "created_at": T0, "updated_at": T0 + len(nodes)}))


def unwritten_figures(memory: Memory) -> tuple[float, float, int]:
    """Why-pending for every live tip of the session before anything is written (the worst
    case: every walk reaches the first turn): ours (shared trunks walked once) vs one
    ``Memory.pending`` walk per tip. Milliseconds, and the number of tips."""
    tips = [t for t in memory.live_tips(SID) if t]
    start = time.perf_counter()
    ours = pending_by_tip(memory, SID, tips)
    ours_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    base = {tip: memory.pending(SID, tip) for tip in tips}
    base_ms = (time.perf_counter() - start) * 1000
    assert ours == base
    return ours_ms, base_ms, len(tips)


def build(home: Path, n: int) -> tuple[Memory, tuple[float, float, int]]:
    grow(home, n)
    store = SessionStore(home / "sessions", git=False)
    memory = Memory(home, settings=load_settings(home, {"trigger_tokens": 16_000}), store=store)
    unwritten = unwritten_figures(memory)
    pending = memory.pending(SID)
    keep = {r.node_id for r in pending[-10:]}
    for _ in range(10_000):  # the boundary write, minus the newest 10 head turns
        pending = [r for r in memory.pending(SID) if r.node_id not in keep]
        if not pending:
            break
        step = memory.write_batch(SID, pending[:400], store.head(SID))
        if step.failure:
            raise SystemExit(f"write failed: {step.failure}")
    return memory, unwritten


def render_ms(browser, path: Path, shot: Path | None = None) -> float:
    page = browser.new_page(viewport={"width": 1366, "height": 768})
    page.goto(path.as_uri())
    page.wait_for_selector('body[data-ready="1"]', timeout=120_000)
    value = page.evaluate("window.__viewReady")
    if shot is not None:
        page.screenshot(path=str(shot))
    page.close()
    return float(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2-core machine)")
    rows = []
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as tmp:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for n in sizes:
            home = Path(tmp) / f"h{n}"
            t = time.perf_counter()
            memory, (tips_ms, tips_base_ms, tips) = build(home, n)
            built = time.perf_counter() - t
            gen, page_text = [], ""
            for _ in range(args.rounds):
                t = time.perf_counter()
                model = session_model(memory, SID)
                page_text = render_page(model)
                gen.append((time.perf_counter() - t) * 1000)
            ours_path = Path(tmp) / f"view-{n}.html"
            ours_path.write_text(page_text, encoding="utf-8")
            base_path = Path(tmp) / f"baseline-{n}.html"
            base_path.write_text(BASELINE.replace("MODEL", embed_json(model)), encoding="utf-8")
            ours = [render_ms(browser, ours_path, OUT / f"view-{n}.png" if i == 0 else None)
                    for i in range(args.rounds)]
            base = [render_ms(browser, base_path) for _ in range(args.rounds)]
            counts = model["counts"]
            row = {"nodes": len(model["nodes"]), "written": counts["written"],
                   "pending": counts["pending"], "cited_blocks": len(model["blocks"]),
                   "page_mb": len(page_text.encode()) / 1e6,
                   "generate_ms": statistics.median(gen),
                   "render_ms": statistics.median(ours), "baseline_ms": statistics.median(base),
                   "load": os.getloadavg()[0], "build_s": built, "tips": tips,
                   "unwritten_why_ms": tips_ms, "unwritten_why_baseline_ms": tips_base_ms}
            rows.append(row)
            print(f"{row['nodes']:>6} nodes ({row['written']} written, {row['pending']} "
                  f"pending, {row['cited_blocks']} cited blocks, page {row['page_mb']:.2f} MB): "
                  f"generate {row['generate_ms']:.0f} ms; render {row['render_ms']:.0f} ms vs "
                  f"draw-everything baseline {row['baseline_ms']:.0f} ms "
                  f"({row['baseline_ms'] / row['render_ms']:.1f}x); load {row['load']:.2f}",
                  flush=True)
            print(f"        before any write, why-pending for {tips} tips: {tips_ms:.0f} ms vs "
                  f"one walk per tip {tips_base_ms:.0f} ms "
                  f"({tips_base_ms / max(tips_ms, 1e-9):.1f}x)", flush=True)
        browser.close()
    print(json.dumps(rows), file=sys.stderr)


if __name__ == "__main__":
    main()
