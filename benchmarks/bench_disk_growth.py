"""How much disk memory's git history and search index take per byte of text written, as a
curve over the number of writes: ours beside a baseline commit, in one run.

Each side runs in its own process on its own copy of a synthetic workspace (``--size`` MB of
topics citing archived turns, as topic_gen.py builds them; its history packed first, as a memory
written to for a while keeps it, see ``workspaces.packed_workspace``). The search index is
built, then the process makes ``--writes`` writes of one of three kinds:

- ``batch``: the embedded writer writes a new session of ``--turns`` turns (one batch at
  ``--batch`` tokens: one install, one commit), all sessions under one title, so one topic
  file grows by a batch per write and the archive gains a file per write;
- ``claim``: one transaction appends a one-claim paragraph to a topic (claim_write.py, the
  write bench_search.py makes), spread over the topics;
- ``claims``: the same with ``--claims`` such paragraphs in one transaction, committed with
  a message shaped as the write path's (``memory: write N turn(s) of <session id>``).

``--curve`` prints git ÷ text by write size instead: ``--writes`` writes each of 1, 2, 4, 8
and 16 claims and of one batch, on disk as each side's packing left it and fully packed,
with the fixed cost per commit (the floor) and its blobs, ours beside the baseline.
The workspace's history is given the identity a memory workspace writes with (its seed has
none, and a global ``user.name`` would stand in for it); every git run is pinned to it.

After the writes 1, 2, 4, 8, ... it measures:

- text: the bytes the writes added to ``topics/`` and to ``sources/`` (the evidence archive);
- git: the bytes under ``.git`` (every file: packs, loose objects, index), as left by the
  writes; and at the end once more after ``git repack -a -d`` (everything in one pack: the
  floor git could reach), with what one commit added to such a pack by object type (every
  object reachable from the first and from the last commit packed alike, their difference
  per commit; each object also costs a 28-byte ``.idx`` entry), again with every delta
  searched anew over a wider window (as ``git gc --aggressive``), and the floor a commit
  sets whatever it changes (commit object, trees, .idx entries) as a multiple of the text;
- index: the main file ``search.sqlite`` after ``PRAGMA wal_checkpoint(TRUNCATE)`` (the WAL
  folded in and emptied; the -shm file is a fixed 32 kB and not counted): whole 4 kB pages,
  free ones included; the bytes its pages hold (SQLite's dbstat: page size less unused
  space, free pages excluded); and the free pages it keeps.

Growth is printed as a ratio to the text the writes added: git to topics + sources (a write
adds both to the home and the history holds both) and, as printed before, to topics alone;
the index to topics (it indexes topics only). Also the CPU time per write (the process and
the git it ran; in brackets the part spent updating the search index) and the machine load.

Usage:
    python benchmarks/bench_disk_growth.py [--size 10] [--writes 32]
        [--write batch|claim|claims] [--claims 1] [--turns 100] [--batch 2000]
        [--curve] [--no-aggressive] [--baseline-rev 293a2ab]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from claim_write import CLAIM_WRITE
from workspaces import CHILD_HELPERS, baseline_src, copy_workspace, load, ours_src

BASELINE = "293a2ab"  # main before issue 12's disk work (pack every 20 commits)
IDX_ENTRY = 28  # bytes a packed object costs in the pack's .idx: its sha, crc and offset

CHILD = r'''
import json, os, resource, sqlite3, subprocess, sys, tempfile, time
from pathlib import Path
from scriptorium.config import load_settings
from scriptorium.memory.search import search
from scriptorium.memory.writing import Memory

home, kind, writes = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
turns, batch, claims = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
aggressive = sys.argv[7] == "1"
mem = Memory(home, settings=load_settings(home, {"trigger_tokens": batch}))
ws = mem.workspace

''' + CHILD_HELPERS + CLAIM_WRITE + r'''
def index():
    # the main file once the WAL is folded in and emptied (the -shm file is a fixed 32 kB)
    con = sqlite3.connect(ws.runtime_dir / "search.sqlite")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    held = con.execute("SELECT sum(pgsize - unused) FROM dbstat").fetchone()[0]
    free = con.execute("PRAGMA freelist_count").fetchone()[0] * \
        con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    return os.path.getsize(ws.runtime_dir / "search.sqlite"), held, free

# every git run here is pinned to the workspace's repository (never one found upward)
GIT_ENV = {**os.environ, "GIT_DIR": str(ws.root / ".git"), "GIT_WORK_TREE": str(ws.root),
           "GIT_CEILING_DIRECTORIES": str(ws.root.parent)}

def git(*args):
    return subprocess.run(["git", *args], cwd=ws.root, capture_output=True, text=True,
                          check=True, env=GIT_ENV).stdout

def packed_by_type(rev, *options):
    # every object reachable from ``rev`` packed into one pack as ``git repack -a -d`` would
    # (``options``: more pack-objects options): bytes in the pack per object type (a delta's
    # size when stored as one), and how many objects (each also costs an entry in the .idx)
    with tempfile.TemporaryDirectory() as tmp:
        name = subprocess.run(["git", "pack-objects", "-q", "--revs", *options, f"{tmp}/p"],
                              cwd=ws.root, env=GIT_ENV,
                              input=rev + "\n", capture_output=True, text=True,
                              check=True).stdout.strip()
        listed = git("verify-pack", "-v", f"{tmp}/p-{name}.idx")
    kinds = {}
    for line in listed.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[1] in ("blob", "tree", "commit", "tag"):
            n, total = kinds.get(parts[1], (0, 0))
            kinds[parts[1]] = (n + 1, total + int(parts[3]))
    return kinds

topic_files = sorted(p.relative_to(ws.root).as_posix() for p in ws.topics_dir.rglob("*.md"))

def write(i):
    if kind == "batch":
        session(f"w{i}", turns, "Offsite planning")
        result = mem.write_session(f"w{i}")
        assert result.failure is None and len(result.marked) == turns, result.failure
        return
    if kind == "claim":
        claim_write(ws, claim_topic(topic_files, i), i)
    else:
        claims_write(ws, claim_topic(topic_files, i), i, claims)

def claims_write(ws, rel, i, k):
    # k one-claim paragraphs as claim_write writes them, into one topic in one transaction,
    # its commit message shaped as the write path's (its length decides whether git packs a
    # commit as a delta of its parent)
    sid = "openprogram/s-0/n0"
    with ws.begin(allowed_sources=[sid]) as tx:
        path = tx.stage / rel
        text = path.read_text()
        for j in range(k):
            text += (f"\nA new paragraph marker{i}x{j}y about the kiln and its glaze, fired "
                     f"on day {i}.[^e{j + 1}]\n\n"
                     f"[^e{j + 1}]: Time: `2026-09-01`; Sources: [new]({sid})\n")
        path.write_text(text)
        session = f"3f2a9c1e-7d4b-4e1a-9b3c-2d1e0f9a8b7{i % 8}"  # an importer's session id
        assert tx.commit(f"memory: write {k} turn(s) of {session}").changed_files == [rel]

# CPU spent updating the search index inside the writes (its write transaction; both sides
# have it under this name)
from scriptorium.memory.search.index import SearchIndex
index_cpu = [0.0]
_apply = SearchIndex._apply
def _timed_apply(self, *args, **kwargs):
    c0 = time.process_time()
    try:
        return _apply(self, *args, **kwargs)
    finally:
        index_cpu[0] += time.process_time() - c0
SearchIndex._apply = _timed_apply

search(ws, "kiln")  # the index, built
write(-1)  # the first write of the process (catalog, stage) is not measured
def commits():
    return int(git("rev-list", "--count", "HEAD"))
topics0, sources0, git0, (idx0, held0, _), commits0 = (
    size(ws.topics_dir), size(ws.sources_dir), size(ws.root / ".git"), index(), commits())
base = git("rev-parse", "HEAD").strip()
spent = 0.0
index_cpu[0] = 0.0
for i in range(writes):
    c0 = cpu()
    write(i)
    spent += cpu() - c0
    n = i + 1
    if n & (n - 1) == 0 or n == writes:
        idx, held, free = index()
        print(json.dumps({"writes": n, "topics": size(ws.topics_dir) - topics0,
                          "sources": size(ws.sources_dir) - sources0,
                          "git": size(ws.root / ".git") - git0, "index": idx - idx0,
                          "held": held - held0, "free": free, "cpu_ms": spent * 1000 / n,
                          "index_ms": index_cpu[0] * 1000 / n,
                          "commits": commits() - commits0}), flush=True)
git("repack", "-a", "-d", "-q")
def added(*options):
    after, before = packed_by_type("HEAD", *options), packed_by_type(base, *options)
    return {k: (n - before.get(k, (0, 0))[0], b - before.get(k, (0, 0))[1])
            for k, (n, b) in after.items()}
# the same with every delta searched again, over a wider window and deeper chains (what
# ``git gc --aggressive`` does): whether other delta bases shrink the per-commit floor
AGGRESSIVE = ("--no-reuse-delta", "--window=250", "--depth=250")
print(json.dumps({"packed": size(ws.root / ".git") - git0, "objects": added(),
                  "aggressive": added(*AGGRESSIVE) if aggressive else None}), flush=True)
'''


def run(src: Path, args: argparse.Namespace, kind: str | None = None,
        claims: int | None = None) -> tuple[list[dict], dict]:
    """One side's writes in a child process (``kind``/``claims``: this run's write, default
    the command line's): the growth rows, and what the writes added to a full pack."""
    with tempfile.TemporaryDirectory(prefix="bench-disk-") as tmp:
        home = Path(tmp)
        copy_workspace(args.size, home / "memory", packed=True)
        # the identity a memory workspace's history is made with (its .git/config): the
        # seed's has none, and a global user.name would stand in for it on the baseline side
        for key, value in (("user.name", "scriptorium memory"),
                           ("user.email", "memory@scriptorium.local")):
            git_dir = home / "memory" / ".git"
            subprocess.run(["git", "config", key, value], check=True,
                           env={**os.environ, "GIT_DIR": str(git_dir),
                                "GIT_CEILING_DIRECTORIES": str(home)})
        env = {**os.environ, "PYTHONPATH": str(src), "GIT_CONFIG_NOSYSTEM": "1"}
        proc = subprocess.run([sys.executable, "-c", CHILD, str(home), kind or args.write,
                               str(args.writes), str(args.turns), str(args.batch),
                               str(claims or args.claims),
                               "0" if kind or args.no_aggressive else "1"],
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        return rows[:-1], rows[-1]


def ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}" if b > 0 else "–"


def index_cell(row: dict) -> str:
    return (f"{ratio(row['index'], row['topics'])} ({ratio(row['held'], row['topics'])}; "
            f"{row['free'] / 1e3:.0f})")


def commit_cost(kinds: dict, per: int) -> tuple[float, float, float]:
    """Bytes one commit added to a full pack: the floor it sets whatever it changes (commit
    object, trees, an .idx entry per object), its blobs, and its .idx entries alone."""
    entries = sum(n for n, _ in kinds.values()) * IDX_ENTRY / per
    floor = sum(total for kind, (_, total) in kinds.items() if kind != "blob") / per + entries
    return floor, kinds.get("blob", (0, 0))[1] / per, entries


def per_commit(kinds: dict, per: int, text: float) -> str:
    """What one commit added to a full pack, by object type, and the floor it sets."""
    parts = ", ".join(f"{kind} {total / per:.0f} B ({n / per:.1f} objects)"
                      for kind, (n, total) in sorted(kinds.items()))
    floor, blobs, entries = commit_cost(kinds, per)
    return (f"{parts}; .idx entries {entries:.0f} B; text {text:.0f} B a commit. Floor "
            f"(commit + trees + .idx) {floor:.0f} B = {floor / text:.2f}x the text; all "
            f"{(floor + blobs) / text:.2f}x; above the floor (the blobs) "
            f"{blobs / text:.2f}x")


CURVE = (1, 2, 4, 8, 16)  # claims per write; then one batch write


def curve(args: argparse.Namespace) -> None:
    """git ÷ text by write size: writes of 1–16 claims (one topic, one transaction each) and
    of one batch, ours beside the baseline, each run in its own process."""
    print("| write | text per write | git on disk ÷ text after the writes: ours / baseline "
          "| fully packed ÷ text: ours / baseline | floor per commit (commit + trees + "
          ".idx), B: ours / baseline | blobs per commit, B: ours / baseline |")
    print("|---|---|---|---|---|---|")
    for kind, claims in [("claims", k) for k in CURVE] + [("batch", 1)]:
        cells = []
        for src in (ours_src(), baseline_src(args.baseline_rev)):
            rows, end = run(src, args, kind, claims)
            last, per = rows[-1], max(rows[-1]["commits"], 1)
            text = last["topics"] + last["sources"]
            floor, blobs, _ = commit_cost(end["objects"], per)
            cells.append((text / per, last["git"] / text, (floor + blobs) * per / text,
                          floor, blobs))
        (t, disk, packed, floor, blobs), b = cells
        name = (f"{claims} claim{'s' if claims > 1 else ''}" if kind == "claims" else
                f"a {args.turns}-turn batch ({args.batch}-token batches)")
        print(f"| {name} | {t:.0f} B | {disk:.2f} / {b[1]:.2f} | {packed:.2f} / {b[2]:.2f} "
              f"| {floor:.0f} / {b[3]:.0f} | {blobs:.0f} / {b[4]:.0f} |", flush=True)
    print("\nfully packed: what the writes added to one pack of everything (``git repack "
          "-a -d``), per commit; the floor is paid by every commit whatever it changes, so "
          "git ÷ text is at least floor ÷ (text per write). On disk: as each side's own "
          "packing left .git after the writes.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=float, default=10, help="MB of topics in the workspace")
    ap.add_argument("--writes", type=int, default=32)
    ap.add_argument("--write", choices=("batch", "claim", "claims"), default="batch",
                    help="claims: --claims claims a write, with a write path's message")
    ap.add_argument("--turns", type=int, default=100, help="turns a batch write writes")
    ap.add_argument("--batch", type=int, default=2000, help="batch size in tokens")
    ap.add_argument("--claims", type=int, default=1, help="claims a claim write appends")
    ap.add_argument("--curve", action="store_true",
                    help=f"git ÷ text by write size ({', '.join(map(str, CURVE))} claims, "
                         f"one batch), --writes writes each")
    ap.add_argument("--no-aggressive", action="store_true",
                    help="skip the aggressive repacking (minutes at 10 MB and more)")
    ap.add_argument("--baseline-rev", default=BASELINE)
    args = ap.parse_args()
    if args.curve:
        print(f"python {sys.version.split()[0]}; {args.size:g} MB of topics; {args.writes} "
              f"writes of each size; baseline = commit {args.baseline_rev}; load average at "
              f"start {load()}\n")
        curve(args)
        print(f"load average at end {load()}")
        return
    print(f"python {sys.version.split()[0]}; {args.size:g} MB of topics; {args.writes} "
          f"{args.write} writes" + (f" of {args.turns} turns at {args.batch}-token batches"
                                    if args.write == "batch" else f" of {args.claims} claim(s)")
          + f"; baseline = commit {args.baseline_rev}; load average at start {load()}\n")
    sides = {"ours": run(ours_src(), args)}
    at_ours = load()
    sides["baseline"] = run(baseline_src(args.baseline_rev), args)
    print("Ratios: growth ÷ text the writes added (cumulative since the first measured "
          "write). git counts every file under .git; the text a write adds to the home is its "
          "topic text and the evidence it archives (sources), and the history holds both, so "
          "git is divided by both (and by topics alone, the ratio printed before). The index "
          "indexes topics only: its main file after a WAL checkpoint (TRUNCATE), in whole 4 kB "
          "pages, then the bytes its pages hold (dbstat) and the free pages it keeps.\n")
    print("| writes | text added (topics + sources) | git ÷ (topics + sources): ours / "
          "baseline | git ÷ topics: ours / baseline | index file ÷ topics (held ÷ topics; "
          "free kB): ours / baseline | CPU ms per write (of which the index's update): ours / "
          "baseline |")
    print("|---|---|---|---|---|---|")
    ours, base = sides["ours"][0], sides["baseline"][0]
    for o, b in zip(ours, base):
        text = o["topics"] + o["sources"]
        print(f"| {o['writes']} | {o['topics'] / 1e3:.1f} + {o['sources'] / 1e3:.1f} kB "
              f"| {ratio(o['git'], text)} / {ratio(b['git'], b['topics'] + b['sources'])} "
              f"| {ratio(o['git'], o['topics'])} / {ratio(b['git'], b['topics'])} "
              f"| {index_cell(o)} / {index_cell(b)} "
              f"| {o['cpu_ms']:.0f} ({o['index_ms']:.2f}) / {b['cpu_ms']:.0f} "
              f"({b['index_ms']:.2f}) |")
    last_o, last_b = ours[-1], base[-1]
    print(f"\nafter `git repack -a -d` (everything in one pack): git ÷ (topics + sources) "
          f"{ratio(sides['ours'][1]['packed'], last_o['topics'] + last_o['sources'])} / "
          f"{ratio(sides['baseline'][1]['packed'], last_b['topics'] + last_b['sources'])}")
    print(f"commits made by the measured writes: {last_o['commits']} / {last_b['commits']}")
    for name, (rows, end) in sides.items():
        per = max(rows[-1]["commits"], 1)
        text = (rows[-1]["topics"] + rows[-1]["sources"]) / per
        for how, kinds in (("packed", end["objects"]),
                           ("packed aggressively (deltas searched again, window and depth 250)",
                            end.get("aggressive"))):
            if kinds:
                print(f"{name}, {how}: {per_commit(kinds, per, text)}")
    print("The floor is what a commit costs whatever it changes: the commit object, the "
          "trees from the root down to the changed file (each a delta of its previous "
          "version) and an .idx entry for each object. While a write costs one commit, git "
          "grows by at least floor ÷ text per write.")
    print(f"load average after ours {at_ours}; at end {load()}")


if __name__ == "__main__":
    main()
