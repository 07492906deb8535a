"""Importing is safe with hostile data: ids never escape or collide, bookkeeping is never
written through a symlink, and secret-looking values never reach the memory topics."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from cckit import SESSION, Transcript
from importkit import memory_of
from scriptorium.errors import InvalidInput
from scriptorium.fsutil import check_name
from scriptorium.importers import import_sources
from scriptorium.importers.ids import node_id, session_id
from scriptorium.redact import redact
from scriptorium.sessions import SessionStore

SECRETS = {
    "openai": "sk-proj-Abcdefghijklmnopqrstuvwxyz0123456789",
    "anthropic": "sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUV_wxyz-0123456789",
    "github": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "bearer": "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijk",
    "pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----",
    "assignment": "password=hunter2hunter2",
}


@given(st.text(min_size=1, max_size=300))
def test_every_source_id_becomes_a_safe_stable_node_id(raw):
    nid = node_id(raw)
    assert check_name(nid) == nid and nid == node_id(raw)
    assert nid != "ROOT" and not nid.startswith("summary_") and len(nid) <= 100


@given(st.text(min_size=1, max_size=200))
def test_session_ids_are_lowercase_so_case_twins_map_to_one_session(raw):
    sid = session_id("claude-code", raw)
    assert check_name(sid) == sid and sid == sid.lower()
    assert session_id("claude-code", raw.upper()) == session_id("claude-code", raw.lower()) \
        or raw.upper().lower() != raw.lower()


def test_reserved_and_unsafe_source_ids_are_mapped_deterministically(store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    t.user("ROOT", None, "a turn whose source id is our root sentinel")
    t.assistant("../../etc/passwd", "ROOT", "an id with slashes")
    t.user("summary_x", "../../etc/passwd", "an id that looks like a summary")
    path = t.write()
    import_sources(store, home, "claude-code", [path])
    sid = f"cc-{SESSION}"
    branch = store.get_branch(sid)
    assert [m["source_id"] for m in branch] == ["ROOT", "../../etc/passwd", "summary_x"]
    assert all(m["id"].startswith("h-") for m in branch)
    assert not any(p.name == "passwd" for p in home.rglob("*"))


def test_bookkeeping_is_never_written_through_a_symlink(home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (home / "imports").symlink_to(outside, target_is_directory=True)
    assert not list(outside.iterdir())
    t = Transcript(tmp_path / "src" / f"{SESSION}.jsonl")
    t.user("u1", None, "hi")
    with pytest.raises(InvalidInput, match="symlink"):
        import_sources(SessionStore(home / "sessions", git=False), home, "claude-code",
                       [t.write()])
    assert list(outside.iterdir()) == []


def test_symlinked_source_directories_are_not_followed(store, home, tmp_path):
    src = tmp_path / "src"
    t = Transcript(tmp_path / "elsewhere" / f"{SESSION}.jsonl")
    t.user("u1", None, "hi")
    t.write()
    src.mkdir()
    (src / "loop").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert import_sources(store, home, "claude-code", [src]).files == []


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_redact_removes_each_kind_of_secret(kind):
    out = redact(f"here: {SECRETS[kind]} done")
    assert "[REDACTED" in out
    assert SECRETS[kind].split("\n")[-1].split()[-1] not in out or kind == "pem" and \
        "END RSA PRIVATE KEY" not in out


def test_redact_leaves_ordinary_text_alone():
    text = "The budget is 50k euros; the task list has 12 items and sk- is a prefix."
    assert redact(text) == text


def test_a_write_after_import_leaves_no_secret_in_the_topics(store, home, tmp_path):
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    said = " and ".join(SECRETS.values())
    t.user("u1", None, f"Deploy with these credentials: {said}. The region is eu-west-1.")
    t.assistant("a1", "u1", f"Deploying to eu-west-1 using {SECRETS['openai']}.")
    path = t.write()
    mem = memory_of(store, home)
    out = mem.import_sessions("claude-code", [path], write=True)
    assert out["writes"][0]["marked"] == ["u1", "a1"]
    memory_text = "\n".join(mem.show(rel)["text"] for rel in mem.workspace.topic_paths())
    # the archived evidence, as search returns it
    memory_text += "\n".join(h.text for h in mem.search("region eu-west-1", top_k=20,
                                                         include_sources=True))
    if getattr(store, "pg", None) is None:  # a directory home: every file memory wrote
        memory_text += "\n".join(p.read_text() for p in (home / "memory").rglob("*.md"))
    assert "eu-west-1" in memory_text  # the turn was written…
    for secret in SECRETS.values():
        for piece in secret.split("\n"):
            if len(piece) > 12:
                assert piece not in memory_text  # …without its secrets
    stored = mem.store.get_node(f"cc-{SESSION}", "u1").output
    assert SECRETS["github"] in stored  # the store keeps the user's own copy
    mem.close()


def test_an_unknown_kind_and_a_missing_path_are_clear_errors(store, home, tmp_path):
    with pytest.raises(InvalidInput, match="unknown import kind"):
        import_sources(store, home, "slack", [])
    with pytest.raises(InvalidInput, match="no such file or directory"):
        import_sources(store, home, "pi", [tmp_path / "nope"])
    with pytest.raises(InvalidInput, match="needs the export"):
        import_sources(store, home, "chatgpt", [])
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"not": "an array"}))
    report = import_sources(store, home, "chatgpt", [bad]).files[0]
    assert "not a JSON array" in report.errors[0]


def test_a_corrupt_bookkeeping_file_is_a_clear_error_and_is_left_alone(dir_store, home,
                                                                      tmp_path):
    from scriptorium.errors import CorruptFile

    (home / "imports").mkdir()
    db = home / "imports" / "state.sqlite"
    db.write_bytes(b"not a database at all, just bytes" * 100)
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    t.user("u1", None, "hi")
    with pytest.raises(CorruptFile, match="state.sqlite"):
        import_sources(dir_store, home, "claude-code", [t.write()])
    assert db.read_bytes().startswith(b"not a database")


def test_a_lone_surrogate_in_a_transcript_is_kept_as_a_replacement_character(store, home,
                                                                             tmp_path):
    """Half a surrogate pair escaped in the JSON (`"\\ud83d"`) decodes to text no file holds
    as UTF-8: it used to end the import with a traceback (found by benchmarks/faults_fuzz.py)."""
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    t.user("u1", None, "half an emoji \ud83d and the rest")
    t.assistant("a1", "u1", "fine")
    path = t.write()
    assert "\\ud83d" in path.read_text()
    row = import_sources(store, home, "claude-code", [path]).to_dict()["files"][0]
    assert row["nodes_added"] == 2 and row["replaced_characters"] >= 1
    assert store.get_branch(f"cc-{SESSION}")[0]["content"] == "half an emoji \ufffd and the rest"



def test_raw_surrogate_bytes_in_a_transcript_line_are_kept_as_a_replacement_character(
        store, home, tmp_path):
    """json.loads decodes bytes with "surrogatepass": a surrogate's raw bytes (\\xed\\xa0\\x80)
    become a lone surrogate just like the escape does."""
    t = Transcript(tmp_path / f"{SESSION}.jsonl")
    t.user("u1", None, "raw MARK bytes")
    t.assistant("a1", "u1", "fine")
    path = t.write()
    path.write_bytes(path.read_bytes().replace(b"MARK", b"\xed\xa0\x80"))
    row = import_sources(store, home, "claude-code", [path]).to_dict()["files"][0]
    assert row["nodes_added"] == 2 and row["replaced_characters"] >= 1
    assert store.get_branch(f"cc-{SESSION}")[0]["content"] == "raw \ufffd bytes"
