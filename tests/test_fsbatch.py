"""fsbatch.atomic_write_many: many files replaced in one durable step, never a torn file."""

from __future__ import annotations

import ctypes
import errno
import os

import pytest

from scriptorium import fsbatch
from scriptorium.errors import InvalidInput


def _files(tmp_path, n=6):
    paths = [tmp_path / f"f{i}.json" for i in range(n)]
    for i, p in enumerate(paths):
        p.write_bytes(b'{"old": %d}' % i)
    return paths


def test_every_file_gets_its_new_bytes_and_mode_and_nothing_else_is_left(tmp_path):
    paths = _files(tmp_path)
    fsbatch.atomic_write_many([(p, b'{"new": %d}' % i) for i, p in enumerate(paths)],
                              mode=0o640)
    assert [p.read_bytes() for p in paths] == [b'{"new": %d}' % i for i in range(6)]
    assert {os.stat(p).st_mode & 0o777 for p in paths} == {0o640}
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in paths)


def test_a_symlink_target_or_directory_is_refused_before_anything_is_written(tmp_path):
    paths = _files(tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"keep")
    os.symlink(outside, tmp_path / "link.json")
    with pytest.raises(InvalidInput, match="symlink"):
        fsbatch.atomic_write_many([(paths[0], b"x"), (tmp_path / "link.json", b"x")])
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "alias")
    with pytest.raises(InvalidInput, match="symlink"):
        fsbatch.atomic_write_many([(paths[0], b"x"), (tmp_path / "alias" / "a.json", b"x")])
    assert paths[0].read_bytes() == b'{"old": 0}' and outside.read_bytes() == b"keep"
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_a_temp_name_already_taken_is_never_opened_or_reused(tmp_path, monkeypatch):
    paths = _files(tmp_path, 2)
    taken = tmp_path / f".{paths[0].name}.{os.getpid():x}-ff.new.tmp"
    taken.write_bytes(b"a dead process's temp")
    monkeypatch.setattr(fsbatch, "_names", iter([0xff, 0x100, 0x101, 0x102, 0x103]))
    fsbatch.atomic_write_many([(paths[0], b"A"), (paths[1], b"B")])
    assert taken.read_bytes() == b"a dead process's temp"  # O_EXCL: a fresh name instead
    assert paths[0].read_bytes() == b"A" and paths[1].read_bytes() == b"B"


def test_when_the_bytes_cannot_be_made_durable_nothing_is_renamed_and_no_temp_is_left(
        tmp_path, monkeypatch):
    paths = _files(tmp_path)

    def failing_syncfs(fd: int) -> int:
        ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(fsbatch, "USE_SYNCFS", True)
    monkeypatch.setattr(fsbatch, "_SYNCFS", failing_syncfs)
    with pytest.raises(OSError, match="syncfs"):
        fsbatch.atomic_write_many([(p, b"new") for p in paths])
    monkeypatch.setattr(fsbatch, "USE_SYNCFS", False)
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    with pytest.raises(OSError):
        fsbatch.atomic_write_many([(p, b"new") for p in paths])
    assert [p.read_bytes() for p in paths] == [b'{"old": %d}' % i for i in range(6)]
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in paths)


def test_a_failure_between_renames_leaves_each_file_old_or_new_and_no_temp(tmp_path):
    paths = _files(tmp_path)

    def stop(i: int) -> None:
        if i == 2:
            raise KeyboardInterrupt("simulated crash")

    with pytest.raises(KeyboardInterrupt):
        fsbatch.atomic_write_many([(p, b"new") for p in paths], after_rename=stop)
    assert [p.read_bytes() for p in paths] == [b"new"] * 3 + [b'{"old": %d}' % i
                                                             for i in range(3, 6)]
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in paths)
