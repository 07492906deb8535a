"""Search cost as memory grows: the derived FTS5 index, ours beside the pre-change code.

For synthetic workspaces of 0.5 / 9.8 / 50 MB of topics (topics citing archived turns, as the
writers produce them; cached under benchmarks/out/), each implementation runs in its own
process on its own copy and reports:

- index build: the whole index from the files (what the first query pays when it is missing);
- warm query: median over the queries, nothing changed since the last query;
- first query after a write: a real transaction adds a paragraph to one topic (its install
  hook updates the index), then the query is timed (median over the writes);
- index size as a ratio to the topic text.

The baseline is commit BASELINE_COMMIT (see workspaces.py); "re-parse per query" is what the
reference system did (read + parse every topic, BM25 in Python), timed here on a few queries.

Usage:
    python benchmarks/bench_search.py [--sizes 0.5,9.8,50] [--queries 20] [--writes 8]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from scriptorium.memory.search.documents import claim_documents
from scriptorium.memory.sources import (SourceRecord, render_v2_file,
                                        source_anchor, v2_path)
from scriptorium.memory.topics import parse_topic

from workspaces import BASELINE_COMMIT, baseline_src, cached_workspace, copy_workspace, load, \
    ours_src

FILE_BYTES = 20_000          # one topic file ~ 20 KB, like a subject file after some weeks
TURNS_PER_SESSION = 60
_WORD = re.compile(r"[^\W_]+")


def vocabulary(rnd: random.Random, size: int = 6000) -> list[str]:
    syllables = ["ka", "lo", "mi", "ren", "to", "sa", "vel", "dor", "na", "pi", "que", "ul",
                 "bra", "ste", "fo", "gan", "hil", "jo", "zu", "wex", "tri", "mon", "ced", "ar"]
    words: list[str] = []
    seen = set()
    while len(words) < size:
        w = "".join(rnd.choice(syllables) for _ in range(rnd.randint(2, 4)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def sentence(rnd: random.Random, vocab: list[str], weights: list[float]) -> str:
    n = rnd.randint(10, 28)
    words = rnd.choices(vocab, weights=weights, k=n)
    return " ".join(words).capitalize() + "."


def build(root: Path, megabytes: float, seed: int = 7) -> dict:
    """A workspace with ~``megabytes`` of topic files citing archived turns."""
    rnd = random.Random(seed)
    vocab = vocabulary(rnd)
    weights = [1.0 / (i + 1) ** 0.9 for i in range(len(vocab))]  # Zipf-like
    (root / "topics").mkdir(parents=True)
    target = int(megabytes * 1_000_000)
    total = 0
    session, turn = 0, 0
    records: dict[str, list[SourceRecord]] = {}
    used: set[str] = set()
    file_no = 0
    while total < target:
        area = f"area-{file_no % 12}"
        rel = f"topics/{area}/subject-{file_no}.md"
        lines = [f"# Subject {file_no} {vocab[file_no % len(vocab)]}", ""]
        size = 0
        section = 0
        while size < FILE_BYTES:
            if size == 0 or rnd.random() < 0.08:
                section += 1
                lines += [f"## Section {section} {rnd.choice(vocab[:300])}", ""]
            claims, defs = [], []
            for _ in range(rnd.randint(1, 3)):
                sid = f"openprogram/s-{session}/n{turn}"
                text = sentence(rnd, vocab, weights)
                day = f"2026-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}"
                records.setdefault(f"s-{session}", []).append(SourceRecord(
                    "openprogram", f"s-{session}", f"n{turn}", rnd.choice(["user", "assistant"]),
                    text, f"{day}T10:00:00+00:00"))
                fid = "e-" + hashlib.sha256(sid.encode()).hexdigest()[:10]
                link = f"../../{v2_path(sid)}#{source_anchor(sid)}"
                claims.append(f"The user said: {text}[^{fid}]")
                defs.append(f"[^{fid}]: Time: `{day}`; Sources: [{text.split()[0].lower()}]"
                            f"({link})")
                turn += 1
                if turn >= TURNS_PER_SESSION:
                    session, turn = session + 1, 0
            bid = hashlib.sha256(f"{rel}|{size}|{len(lines)}".encode()).hexdigest()[:8]
            while bid in used:  # 8 hex digits collide at this many blocks: keep ids unique
                bid = hashlib.sha256(bid.encode()).hexdigest()[:8]
            used.add(bid)
            lines += [" ".join(claims) + f" ^{bid}", ""] + defs + [""]
            size = sum(len(x) + 1 for x in lines)
        text = "\n".join(lines)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        total += len(text.encode())
        file_no += 1
    for thread, recs in records.items():
        p = root / v2_path(recs[0].source_id)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(render_v2_file(recs), encoding="utf-8")
    return {"bytes": total, "files": file_no, "vocab": vocab}


# -- the baseline: re-parse everything per query -----------------------------------------------


def baseline_search(root: Path, query: str, top_k: int = 5) -> list[tuple[float, str]]:
    """Read and parse every topic file, build claim documents, score with Okapi BM25."""
    docs = []
    for path in sorted((root / "topics").rglob("*.md")):
        rel = path.relative_to(root).as_posix()
        doc = parse_topic(path.read_text(encoding="utf-8"), rel, strict=False)
        claims, _ = claim_documents(doc, lambda _p, _t: None)
        for c in claims:
            words = [w.casefold() for w in _WORD.findall(
                " ".join([c.text, rel.replace("/", " "), *c.headings, *c.dates]))]
            docs.append((c.block_id or "", words))
    n = len(docs)
    avg = sum(len(w) for _, w in docs) / max(n, 1)
    terms = {w.casefold() for w in _WORD.findall(query)}
    df = Counter()
    for _, words in docs:
        df.update(terms & set(words))
    k1, b = 1.2, 0.75
    scored = []
    for block_id, words in docs:
        tf = Counter(w for w in words if w in terms)
        score = 0.0
        for t, f in tf.items():
            idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            score += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(words) / avg))
        if score > 0:
            scored.append((score, block_id))
    scored.sort(reverse=True)
    return scored[:top_k]


# -- measuring ---------------------------------------------------------------------------------

CHILD = r"""
import json, os, random, statistics, sys, time
from pathlib import Path
from scriptorium.memory.search import attach, rebuild, search
from scriptorium.memory.workspace import Workspace

root, queries, writes = Path(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
ws = Workspace.open(root)
attach(ws)

def ms(fn, *a, **k):
    t0 = time.perf_counter(); fn(*a, **k); return (time.perf_counter() - t0) * 1000

build = ms(rebuild, ws, False)
search(ws, queries[0])
warm = [ms(search, ws, q) for q in queries for _ in range(2)]
topic_files = sorted(p.relative_to(root).as_posix() for p in (root / "topics").rglob("*.md"))
sid = "openprogram/s-0/n0"
after = []
for i in range(writes):
    rel = topic_files[(i * 7919) % len(topic_files)]
    with ws.begin(allowed_sources=[sid]) as tx:
        path = tx.stage / rel
        path.write_text(path.read_text() + f"\nA new paragraph marker{i}x.[^e1]\n\n"
                        f"[^e1]: Time: `2026-09-01`; Sources: [new]({sid})\n")
        assert tx.commit("bench: write").changed_files == [rel]
    q = queries[i % len(queries)]
    after.append(ms(search, ws, q))
    assert [h.path for h in search(ws, f"marker{i}x")] == [rel]
size = sum(os.path.getsize(ws.runtime_dir / n) for n in os.listdir(ws.runtime_dir)
           if n.startswith("search.sqlite"))
print(json.dumps({"build": build, "warm": statistics.median(warm), "after": statistics.median(after),
                  "index_bytes": size}))
"""


def run(src: Path, megabytes: float, queries: list[str], writes: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        root = copy_workspace(megabytes, Path(tmp) / "memory")
        proc = subprocess.run([sys.executable, "-c", CHILD, str(root), json.dumps(queries),
                               str(writes)], env={**os.environ, "PYTHONPATH": str(src)},
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0.5,9.8,50", help="MB of topics, comma separated")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--writes", type=int, default=8, help="writes (each then a query), ours")
    ap.add_argument("--baseline-writes", type=int, default=3)
    ap.add_argument("--reparse-queries", type=int, default=2,
                    help="queries timed for the re-parse-per-query baseline (0: skip)")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}; load average at start {load()}; baseline = "
          f"commit {BASELINE_COMMIT} (before this work)\n")
    print("| topics | index build: ours / baseline | warm query: ours / baseline | first query "
          "after a write: ours / baseline | after-write / warm (ours) | index size / topics "
          "(ours / baseline) | re-parse per query |")
    print("|---|---|---|---|---|---|---|")
    for mb in (float(x) for x in args.sizes.split(",")):
        root = cached_workspace(mb)
        topics = sum(p.stat().st_size for p in (root / "topics").rglob("*.md"))
        rnd = random.Random(11)
        vocab = vocabulary(random.Random(7))
        qs = [" ".join(rnd.sample(vocab[20:1500], rnd.randint(1, 3))) for _ in range(args.queries)]
        ours = run(ours_src(), mb, qs, args.writes)
        base = run(baseline_src(), mb, qs, args.baseline_writes)
        reparse = statistics.median(
            [timed(baseline_search, root, q) for q in qs[:args.reparse_queries]]) \
            if args.reparse_queries else float("nan")
        print(f"| {topics / 1e6:.1f} MB | {ours['build'] / 1000:.1f} / {base['build'] / 1000:.1f} s "
              f"| {ours['warm']:.2f} / {base['warm']:.2f} ms "
              f"| {ours['after']:.2f} / {base['after']:.2f} ms "
              f"| {ours['after'] / ours['warm']:.1f}× "
              f"| {ours['index_bytes'] / topics:.2f} / {base['index_bytes'] / topics:.2f} "
              f"| {reparse:.0f} ms |", flush=True)
    print(f"\nload average at end {load()}")


def timed(fn, *args, **kw) -> float:
    t0 = time.perf_counter()
    fn(*args, **kw)
    return (time.perf_counter() - t0) * 1000


if __name__ == "__main__":
    main()
