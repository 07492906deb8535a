"""The C heap's free pages go back to the system between the sessions of a long write
(``scriptorium.heap``): memory a process freed stops counting in its resident set."""

from __future__ import annotations

import gc
import platform
import weakref
from pathlib import Path

import pytest

from scriptorium import heap


def _anon_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="malloc_trim is glibc's")
def test_freed_blocks_below_a_live_one_leave_the_resident_set_when_given_back():
    blocks = [bytearray(3000) for _ in range(10_000)]  # 30 MB of malloc's heap
    pin = bytearray(3000)  # above them: the heap's top cannot shrink past it on its own
    del blocks
    freed = _anon_kb()
    assert heap.give_back() is True
    assert freed - _anon_kb() > 20_000, "the 30 MB freed stayed resident"
    assert len(pin) == 3000


def test_without_the_c_librarys_trim_nothing_is_done_and_it_says_so(monkeypatch):
    monkeypatch.setattr(heap, "_TRIM", None)
    assert heap.give_back() is False


def test_a_collecting_give_back_frees_objects_only_a_cycle_kept():
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # type: ignore[attr-defined]
    gone = weakref.ref(a)
    was_enabled = gc.isenabled()
    gc.disable()  # only the give-back may collect it
    try:
        del a, b
        assert gone() is not None
        heap.give_back()
        assert gone() is not None  # a trim alone frees no object
        heap.give_back(collect=True)
        assert gone() is None
    finally:
        if was_enabled:
            gc.enable()
