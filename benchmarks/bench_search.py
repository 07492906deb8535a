"""Search latency: the derived FTS5 index vs re-parsing every topic file per query.

The reference system's recall re-parsed and BM25-scored the whole topic tree on every query
(66 / 431 / 1292 ms at 0.50 / 3.34 / 9.80 MB of topics). This builds synthetic workspaces of
about those sizes in a temporary directory (topics that cite archived turns, as the writers
produce them), then times, per query:

- baseline: read + parse every topic file, build the claim documents, score them with Okapi
  BM25 in Python (what "re-parse per query" means);
- ours, warm: ``search()`` with the index built (each query still stats every topic file to
  notice hand edits);
- ours after a write: a small transaction's effect (one topic file gains a paragraph), the
  install hook's index update, then the query — the latency a reader sees right after a write.

Usage:
    python benchmarks/bench_search.py [--sizes 0.5,3.3,9.8] [--queries 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from scriptorium.memory.search import SearchIndex, search, update_index
from scriptorium.memory.search.documents import claim_documents
from scriptorium.memory.sources import (SourceArchive, SourceRecord, render_v2_file,
                                        source_anchor, v2_path)
from scriptorium.memory.topics import parse_topic

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


def timed(fn, *args, **kw) -> float:
    t0 = time.perf_counter()
    fn(*args, **kw)
    return (time.perf_counter() - t0) * 1000


def run(megabytes: float, queries: int, rounds: int, baseline_queries: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        root = Path(tmp) / "memory"
        info = build(root, megabytes)
        ws = SimpleNamespace(root=root, runtime_dir=root / ".scriptorium",
                             sources=SourceArchive(root))
        rnd = random.Random(11)
        vocab = info["vocab"]
        qs = [" ".join(rnd.sample(vocab[20:1500], rnd.randint(1, 3))) for _ in range(queries)]

        index = SearchIndex.of(ws)
        build_ms = timed(index.rebuild, False)
        docs = index.count()
        search(ws, qs[0])  # warm the process (imports, statements)

        warm: list[float] = []
        for _ in range(rounds):
            for q in qs:
                warm.append(timed(search, ws, q))

        # After a small transaction: one file gains one paragraph; hook + query.
        after: list[float] = []
        hook: list[float] = []
        topic_files = sorted((root / "topics").rglob("*.md"))
        for i, q in enumerate(qs * rounds):
            path = topic_files[(i * 7919) % len(topic_files)]
            rel = path.relative_to(root).as_posix()
            sid = "openprogram/s-0/n0"
            bid = hashlib.sha256(f"new|{i}".encode()).hexdigest()[:8]
            fid = "e-" + hashlib.sha256(f"new|{i}".encode()).hexdigest()[:10]
            with path.open("a", encoding="utf-8") as fh:
                fh.write(f"\nA new paragraph about {q} marker{i}x.[^{fid}] ^{bid}\n\n"
                         f"[^{fid}]: Time: `2026-09-01`; Sources: [new]"
                         f"(../../{v2_path(sid)}#{source_anchor(sid)})\n")
            t0 = time.perf_counter()
            update_index(ws, SimpleNamespace(changed_files=[rel]))
            t1 = time.perf_counter()
            hits = search(ws, q)
            t2 = time.perf_counter()
            assert hits, "the query must find something"
            fresh = search(ws, f"marker{i}x")  # not timed: the new paragraph is searchable
            assert [h.block_id for h in fresh] == [bid], "a fresh paragraph must be found"
            hook.append((t1 - t0) * 1000)
            after.append((t2 - t0) * 1000)

        base: list[float] = []
        for q in qs[:baseline_queries]:
            base.append(timed(baseline_search, root, q))
        index.close()
        return {"mb": info["bytes"] / 1e6, "files": info["files"], "docs": docs,
                "build_ms": build_ms, "warm": warm, "after": after, "hook": hook,
                "base": base}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0.5,3.3,9.8", help="MB of topics, comma separated")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline-queries", type=int, default=5,
                    help="queries timed for the (slow) baseline")
    args = ap.parse_args()
    rows = []
    for mb in (float(x) for x in args.sizes.split(",")):
        r = run(mb, args.queries, args.rounds, args.baseline_queries)
        rows.append(r)
        print(f"built {r['mb']:.2f} MB: {r['files']} topic files, {r['docs']} claims; "
              f"index build {r['build_ms']:.0f} ms", file=sys.stderr)
    med = statistics.median
    print("| topics | claims | baseline: re-parse per query (median) | ours, warm (median / p95)"
          " | ours after a write: hook + query (median / p95) | hook alone (median) "
          "| ratio baseline / ours warm | ratio baseline / ours after write |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        p95 = lambda xs: sorted(xs)[max(0, math.ceil(0.95 * len(xs)) - 1)]  # noqa: E731
        print(f"| {r['mb']:.2f} MB | {r['docs']} | {med(r['base']):.0f} ms "
              f"| {med(r['warm']):.2f} / {p95(r['warm']):.2f} ms "
              f"| {med(r['after']):.2f} / {p95(r['after']):.2f} ms | {med(r['hook']):.2f} ms "
              f"| {med(r['base']) / med(r['warm']):.0f}× "
              f"| {med(r['base']) / med(r['after']):.0f}× |")


if __name__ == "__main__":
    main()
