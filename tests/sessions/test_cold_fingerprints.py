"""What a cold open makes, and that its cheaper fingerprints hide nothing. It reads each node
file without a stat (fingerprint: listed inode and size read), and the next full scan trusts
a file only if its inode last changed (ctime, which a writer cannot put back) before the open
read it; the nodes carry no per-node attribute dict; the walk to the branch root remembers
every 64th node of the line, not each."""

from __future__ import annotations

import json
import os

from scriptorium.sessions import SessionStore, index as index_mod
from scriptorium.sessions.index import RACY_NS

from test_costs import make_chain


def test_an_in_place_rewrite_after_a_cold_open_is_seen_even_with_its_mtime_put_back(
        tmp_path, monkeypatch):
    root = tmp_path / "sessions"
    make_chain(root, "s", 30)
    hist = root / "s" / "history"
    changed_at = max(os.stat(p).st_ctime_ns for p in hist.iterdir())
    # the open runs just after every file's last change, as far as the index's clock knows
    monkeypatch.setattr(index_mod.time, "time_ns", lambda: changed_at + RACY_NS + 1)
    store = SessionStore(root, git=False)
    assert store.get_node("s", "n7").output == "turn 7"
    path = hist / "00000007-l-n7.json"
    before = os.stat(path)
    doc = json.loads(path.read_bytes())
    doc["output"] = "TURN 7"  # same size, same inode
    while os.stat(path).st_ctime_ns <= changed_at:  # until the file-system clock has ticked
        path.write_text(json.dumps(doc))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # the mtime put back
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns)
    os.utime(hist, ns=(changed_at, changed_at + 1))  # the directory changed: a full scan
    assert store.get_node("s", "n7").output == "TURN 7"


def test_the_first_full_scan_after_a_cold_open_re_reads_only_what_changed(
        tmp_path, monkeypatch):
    root = tmp_path / "sessions"
    make_chain(root, "s", 200)
    ahead = index_mod.time.time_ns() + 3600 * 10**9  # an hour on: every file is old
    monkeypatch.setattr(index_mod.time, "time_ns", lambda: ahead)
    store = SessionStore(root, git=False)
    store.get_branch("s")
    idx = store._index("s")
    parses, scans = idx.parses, idx.scans
    other = SessionStore(root, git=False)
    other.append_message("s", {"id": "x1", "role": "user", "content": "from elsewhere"})
    assert store.get_branch("s")[-1]["id"] == "x1"
    assert idx.scans == scans + 1 and idx.parses == parses + 1
    assert all(len(key) == 3 for key, _ in idx.files.values())  # full fingerprints now
    store.get_branch("s")
    assert idx.parses == parses + 1


def test_a_cold_branch_root_walk_remembers_every_64th_node_not_each(tmp_path):
    root = tmp_path / "sessions"
    make_chain(root, "s", 1500)
    store = SessionStore(root, git=False)
    tail, first = store.branch_tail("s", stop=lambda m: m["id"] == "n1489")
    assert first is not None and first["id"] == "n0"
    idx = store._index("s")
    assert len(idx._root_memo) <= 1500 // 64 + 1  # not one entry per node of the line
    assert all(idx.branch_root(f"n{i}") == "n0" for i in range(0, 1500, 7))


def test_parsed_nodes_carry_no_per_node_attribute_dict_and_share_one_empty_extra(tmp_path):
    root = tmp_path / "sessions"
    make_chain(root, "s", 50)
    store = SessionStore(root, git=False)
    store.get_branch("s")
    loaded = list(store._index("s").nodes.values())
    assert len(loaded) == 50 and not any(hasattr(n, "__dict__") for n in loaded)
    assert len({id(n.extra) for n in loaded}) == 1 and not loaded[0].extra
    copy = store.get_node("s", "n3")  # a copy's extra is its own, and can take keys
    copy.extra["later"] = 1  # type: ignore[index]
    assert not store.get_node("s", "n4").extra
