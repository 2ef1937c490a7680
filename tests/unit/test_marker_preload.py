"""emu.ecn.preload: the switches' eBPF markers loaded in a thread during the build.

One object per switch, each port a slot of its own; every switch taken is its own
(distinct programs), what is not taken is closed, more than asked still load, a
switch taken with another port count is refused, and a load that fails raises in the
builder. Needs root and a kernel that loads the marker; skips otherwise.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import emu.ecn.preload as preload
from core.errors import CapabilityError
from emu.ecn.bpf import close_loaded, compile_marker, load_markers


@pytest.fixture(scope="module", autouse=True)
def loadable():
    if os.geteuid() != 0:
        pytest.skip("loading eBPF programs needs root")
    try:
        for one in load_markers(compile_marker(), 1):
            close_loaded(one)
    except CapabilityError as e:
        pytest.skip(f"the marker does not load here: {e}")


def close_all(taken) -> None:
    for switch in taken:
        for one in switch:
            close_loaded(one)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_each_switch_is_a_marker_of_its_own_its_ports_slots_of_it():
    before = open_fds()
    with preload.MarkerPreload([2, 3, 1]) as markers:
        taken = [markers.take(n) for n in (2, 3, 1, 4)]   # the fourth loaded on the spot
    assert [len(t) for t in taken] == [2, 3, 1, 4]
    assert [[one.slot for one in t] for t in taken] == [[0, 1], [0, 1, 2], [0], [0, 1, 2, 3]]
    assert len({t[0].prog_id for t in taken}) == 4
    assert all(len({one.prog_id for one in t}) == 1 for t in taken)
    close_all(taken)
    assert open_fds() == before


def test_a_switch_taken_with_another_port_count_is_refused():
    before = open_fds()
    with preload.MarkerPreload([2, 3]) as markers:
        first = markers.take(2)
        with pytest.raises(ValueError, match="has 3 ports, not 4"):
            markers.take(4)
    close_all([first])
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
    with preload.MarkerPreload([4] * 24) as markers:
        loaded_ahead(markers, 24)
        assert markers._thread.join(timeout=30) is None and not markers._thread.is_alive()


def test_closing_early_releases_what_was_loaded_ahead():
    before = open_fds()
    markers = preload.MarkerPreload([2] * 10_000)
    first = markers.take(2)
    loaded_ahead(markers, 4)
    markers.close()
    assert not markers._thread.is_alive()
    close_all([first])
    assert open_fds() == before


def test_a_failed_load_raises_where_the_marker_is_taken(monkeypatch):
    calls = []

    def fails_second(obj_path, ports):
        calls.append(obj_path)
        if len(calls) == 2:
            raise CapabilityError("the kernel refused the ECN marker")
        return load_markers(obj_path, ports)
    monkeypatch.setattr(preload, "load_markers", fails_second)
    before = open_fds()
    with preload.MarkerPreload([1, 2, 3]) as markers:
        first = markers.take(1)
        with pytest.raises(CapabilityError, match="refused"):
            markers.take(2)
    close_all([first])
    assert open_fds() == before and len(calls) == 2


def test_the_loading_thread_blocks_every_signal():
    """The verifier gives up (EAGAIN) with a signal pending on its task, and the kernel
    may deliver a process's signal (a lab's SIGALRM time limit, Ctrl-C) to any thread
    not blocking it (CI saw one such failure): the loading thread blocks them all."""
    import signal

    markers = preload.MarkerPreload([1] * 10_000)
    try:
        loaded_ahead(markers, 1)   # the thread is alive: it has thousands more to load
        status = Path(f"/proc/self/task/{markers._thread.native_id}/status").read_text()
        blocked = int(next(line.split()[1] for line in status.splitlines()
                           if line.startswith("SigBlk:")), 16)
        for sig in (signal.SIGALRM, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            assert blocked >> (sig - 1) & 1, (sig, hex(blocked))
    finally:
        markers.close()


def test_a_port_that_cannot_be_marked_leaves_no_fd_behind():
    """The first of a switch's two ports names no interface (nothing here is attached
    to an interface of this namespace): its share and the second's are closed."""
    from core.ecn import Thresholds
    from emu.ports import Port
    from emu.rtnl import Rtnl

    ports = [Port("s1", f"p{i}", (1 << 30) + i, "/proc/self/ns/net", "h", 1e9, 1e6,
                  100_000, "tor", True) for i in range(2)]
    before = open_fds()
    with preload.MarkerPreload([2]) as markers, Rtnl.open() as rtnl, pytest.raises(OSError):
        markers.attach(ports, lambda port: Thresholds.step(1), rtnl, 0)
    assert ports[0].marker is None and ports[1].marker is None
    assert open_fds() == before
