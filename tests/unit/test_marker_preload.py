"""emu.ecn.preload: switch ports' eBPF markers loaded in a thread during the build.

Every marker taken is its own (distinct programs), what is not taken is closed,
fewer than asked still load, and a load that fails raises in the builder. Needs
root and a kernel that loads the marker; skips otherwise.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import emu.ecn.preload as preload
from core.errors import CapabilityError
from emu.ecn.bpf import _load, close_loaded, compile_marker


@pytest.fixture(scope="module", autouse=True)
def loadable():
    if os.geteuid() != 0:
        pytest.skip("loading eBPF programs needs root")
    try:
        close_loaded(_load(compile_marker(), False))
    except CapabilityError as e:
        pytest.skip(f"the marker does not load here: {e}")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_each_take_is_a_marker_of_its_own_and_nothing_is_left_open():
    before = open_fds()
    with preload.MarkerPreload(3) as markers:
        taken = [markers.take() for _ in range(4)]   # the fourth loaded on the spot
    assert len({t.prog_id for t in taken}) == 4
    for t in taken:
        close_loaded(t)
    assert open_fds() == before


def loaded_ahead(markers: preload.MarkerPreload, count: int) -> None:
    """Wait until ``count`` markers wait to be taken."""
    deadline = time.monotonic() + 30
    while markers._ready.qsize() < count:
        assert time.monotonic() < deadline, "the markers were never loaded"
        time.sleep(0.01)


def test_the_markers_load_ahead_without_being_taken():
    """All of them: a loader that waited for the builder to take them would load them
    in the build's critical path again."""
    with preload.MarkerPreload(24) as markers:
        loaded_ahead(markers, 24)
        assert markers._thread.join(timeout=30) is None and not markers._thread.is_alive()


def test_closing_early_releases_what_was_loaded_ahead():
    before = open_fds()
    markers = preload.MarkerPreload(10_000)
    first = markers.take()
    loaded_ahead(markers, 4)
    markers.close()
    assert not markers._thread.is_alive()
    close_loaded(first)
    assert open_fds() == before


def test_a_failed_load_raises_where_the_marker_is_taken(monkeypatch):
    calls = []

    def fails_second(obj_path, trace):
        calls.append(obj_path)
        if len(calls) == 2:
            raise CapabilityError("the kernel refused the ECN marker")
        return _load(obj_path, trace)
    monkeypatch.setattr(preload, "_load", fails_second)
    before = open_fds()
    with preload.MarkerPreload(3) as markers:
        first = markers.take()
        with pytest.raises(CapabilityError, match="refused"):
            markers.take()
    close_loaded(first)
    assert open_fds() == before and len(calls) == 2


def test_the_loading_thread_blocks_every_signal():
    """The verifier gives up (EAGAIN) with a signal pending on its task, and the kernel
    may deliver a process's signal (a lab's SIGALRM time limit, Ctrl-C) to any thread
    not blocking it (CI saw one such failure): the loading thread blocks them all."""
    import signal

    markers = preload.MarkerPreload(10_000)
    try:
        loaded_ahead(markers, 1)   # the thread is alive: it has thousands more to load
        status = Path(f"/proc/self/task/{markers._thread.native_id}/status").read_text()
        blocked = int(next(line.split()[1] for line in status.splitlines()
                           if line.startswith("SigBlk:")), 16)
        for sig in (signal.SIGALRM, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            assert blocked >> (sig - 1) & 1, (sig, hex(blocked))
    finally:
        markers.close()
