"""Bad input: invalid ids, unknown sessions/nodes, corrupt files — one-line errors, nothing
half-written, other sessions unaffected. The API-level refusals run on both homes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storekit import stored
from testkit import json_error

from scriptorium.errors import CorruptFile, InvalidInput
from scriptorium.sessions import SessionStore

BAD_IDS = ["", ".", "..", "a/b", "/", "a\\b", "a\x00b"]


def tree(root: Path) -> dict[str, bytes]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".session.lock"}


def one_line(exc: BaseException) -> None:
    assert "\n" not in str(exc) and str(exc)


@pytest.mark.parametrize("bad", BAD_IDS)
def test_an_invalid_session_id_is_refused_everywhere_in_the_api(any_store, bad):
    store = any_store
    store.create_session("ok")
    before = stored(store)
    calls = [
        lambda: store.create_session(bad),
        lambda: store.exists(bad),
        lambda: store.get_branch(bad),
        lambda: store.list_branches(bad),
        lambda: store.append_message(bad, {"role": "user", "content": "x"}),
        lambda: store.set_head(bad, None),
        lambda: store.merge_node_metadata_batch(bad, {"n": {}}),
        lambda: store.get_meta(bad),
        lambda: store.spawn("ok", "n", "x", caller_session=bad),
    ]
    for call in calls:
        with pytest.raises(InvalidInput) as info:
            call()
        one_line(info.value)
    assert stored(store) == before


@pytest.mark.parametrize("bad", BAD_IDS)
def test_an_invalid_node_id_is_refused_everywhere_in_the_api(any_store, chat, bad):
    store = any_store
    chat(store, "s1", "u1", "a1")
    before = stored(store)
    calls = [
        lambda: store.append_message("s1", {"id": bad, "role": "user", "content": "x"}),
        lambda: store.append_message("s1", {"role": "user", "content": "x", "predecessor": bad
                                            or "."}),
        lambda: store.append_message("s1", {"role": "tool", "content": "x", "caller": bad
                                            or "."}),
        lambda: store.get_node("s1", bad),
        lambda: store.get_branch("s1", bad),
        lambda: store.set_head("s1", bad),
        lambda: store.merge_node_metadata_batch("s1", {bad: {"k": 1}}),
        lambda: store.retry("s1", "a1", "x", node_id=bad),
        lambda: store.retry("s1", bad, "x"),
        lambda: store.edit("s1", "u1", "x", node_id=bad),
        lambda: store.rewind("s1", bad),
        lambda: store.spawn("s1", bad, "x"),
        lambda: store.spawn("s1", "a1", "x", node_id=bad),
        lambda: store.compact("s1", [bad], "x"),
        lambda: store.append_after("s1", bad, {"role": "user", "content": "x"}),
    ]
    for call in calls:
        with pytest.raises(InvalidInput) as info:
            call()
        one_line(info.value)
    assert stored(store) == before


@pytest.mark.parametrize("bad", BAD_IDS)  # in-process runner: a NUL can be passed too
def test_an_invalid_id_on_the_command_line_exits_two_and_writes_nothing(cli, home, bad):
    cli.json("session", "new", "--id", "s1")
    cli.json("session", "add", "s1", "--role", "user", "--text", "x", "--id", "u1")
    before = tree(home)
    for args in [("session", "new", "--id", bad),
                 ("session", "show", bad),
                 ("session", "add", bad, "--role", "user", "--text", "x"),
                 ("session", "add", "s1", "--role", "user", "--text", "x", "--id", bad),
                 ("session", "add", "s1", "--role", "user", "--text", "x", "--after", bad),
                 ("session", "head", "s1", bad),
                 ("session", "rewind", "s1", bad),
                 ("session", "spawn", "s1", "--caller", bad, "--text", "x")]:
        result = cli(*args, "--json")
        assert result.exit_code == 2, (args, result.output)
        err = result.stderr.strip()
        assert err.startswith("error: ") and "\n" not in err
        assert json_error(result)["code"] in {"INVALID_INPUT", "APPEND_REFUSED", "HEAD_REFUSED"}
    assert tree(home) == before


def test_a_corrupt_node_file_is_named_and_other_sessions_still_work(store, chat):
    chat(store, "bad", "u1", "a1")
    chat(store, "good", "g1", "g2")
    path = store.root / "bad" / "history" / "00000001-l-a1.json"
    path.write_text('{"id": "a1", "seq": 1, "role"')
    fresh = SessionStore(store.root, git=False)
    with pytest.raises(CorruptFile) as info:
        fresh.get_branch("bad")
    assert str(path) in str(info.value)
    one_line(info.value)
    assert [m["id"] for m in fresh.get_branch("good")] == ["g1", "g2"]
    assert {r["session_id"] for r in fresh.list_sessions()} == {"bad", "good"}


def test_a_corrupt_node_file_makes_the_cli_exit_four_naming_it(cli, home):
    cli.json("session", "new", "--id", "s1")
    cli.json("session", "add", "s1", "--role", "user", "--text", "x", "--id", "u1")
    path = home / "sessions" / "s1" / "history" / "00000000-u-u1.json"
    path.write_text("not json")
    result = cli("session", "show", "s1", "--json")
    assert result.exit_code == 4 and "00000000-u-u1.json" in result.stderr


def test_a_node_file_whose_id_would_escape_is_corrupt(store, chat):
    chat(store, "s1", "u1")
    path = store.root / "s1" / "history" / "00000000-u-u1.json"
    doc = json.loads(path.read_text())
    doc["id"] = "../../etc"
    path.write_text(json.dumps(doc))
    with pytest.raises(CorruptFile, match="00000000-u-u1.json"):
        SessionStore(store.root, git=False).get_nodes("s1")


def test_corrupt_meta_json_is_named_but_does_not_hide_other_sessions(store, chat):
    chat(store, "s1", "u1")
    chat(store, "s2", "v1")
    (store.root / "s1" / "meta.json").write_text("{oops")
    fresh = SessionStore(store.root, git=False)
    with pytest.raises(CorruptFile, match="meta.json"):
        fresh.get_branch("s1")
    rows = {r["session_id"]: r for r in fresh.list_sessions()}
    assert "meta.json" in rows["s1"]["error"] and rows["s2"]["head_id"] == "v1"


def test_a_symlinked_session_directory_is_not_a_session(store, chat, tmp_path):
    outside = tmp_path / "outside"
    chat(SessionStore(outside, git=False), "real", "u1")
    store.root.mkdir(parents=True, exist_ok=True)
    (store.root / "alias").symlink_to(outside / "real")
    assert not store.exists("alias")
    assert store.list_sessions() == []
