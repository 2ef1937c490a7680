"""core.forkmap.forked_map: the in-turn answer, in order, from forked processes; what
the function raises is raised in the caller; in turn on one CPU."""

from __future__ import annotations

import os

import pytest

from core import forkmap
from core.errors import ParameterError


def _pid_and_square(x: int) -> tuple[int, int]:
    return os.getpid(), x * x


def _refuse(x: int) -> int:
    if x == 3:
        raise ParameterError("x", x, "three is refused")
    return x


def test_the_answer_is_in_order_and_computed_in_other_processes():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU here: forked_map works in turn")
    done = forkmap.forked_map(_pid_and_square, list(range(20)))
    assert [sq for _, sq in done] == [x * x for x in range(20)]
    assert os.getpid() not in {pid for pid, _ in done}


def test_one_cpu_or_one_item_is_done_in_turn_here(monkeypatch):
    assert forkmap.forked_map(_pid_and_square, [5]) == [(os.getpid(), 25)]
    monkeypatch.setattr(forkmap.os, "sched_getaffinity", lambda _pid: {0})
    assert forkmap.forked_map(_pid_and_square, [1, 2]) == [(os.getpid(), 1), (os.getpid(), 4)]


def test_what_the_function_raises_is_raised_in_the_caller():
    with pytest.raises(ParameterError, match="three is refused"):
        forkmap.forked_map(_refuse, list(range(6)))


def _record_child(path: str) -> None:
    """What the background call sees: its pid, its open fds, its blocked signals."""
    status = open("/proc/self/status").read()  # noqa: SIM115 - read whole at once
    blocked = next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:"))
    with open(path, "w") as f:  # safefile: ok - test output
        f.write(f"{os.getpid()} {blocked} {' '.join(sorted(os.listdir('/proc/self/fd')))}")


def test_a_background_call_runs_in_a_child_holding_nothing_of_the_caller(tmp_path):
    import signal

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU here: Background works in turn")
    kept_r, kept_w = os.pipe()   # the caller's: a netlink socket, a BPF map
    try:
        done = forkmap.Background(lambda: _record_child(str(tmp_path / "child")))
        done.wait()
    finally:
        os.close(kept_r)
        os.close(kept_w)
    pid, blocked, *fds = (tmp_path / "child").read_text().split()
    assert int(pid) != os.getpid()
    assert str(kept_r) not in fds[3:] and str(kept_w) not in fds[3:]
    assert len(fds) <= 6   # 0, 1, 2, its pipe, the file it writes, listdir's own
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        assert int(blocked, 16) >> (sig - 1) & 1


def test_what_a_background_call_raises_is_raised_by_wait(monkeypatch):
    def refuse() -> None:
        raise OSError(28, "No space left on device")

    from core.errors import FabricEmuError

    for cpus in ({0, 1}, {0}):
        monkeypatch.setattr(forkmap.os, "sched_getaffinity", lambda _pid, c=cpus: c)
        done = forkmap.Background(refuse)
        with pytest.raises(FabricEmuError, match=r"OSError: \[Errno 28\] No space left"):
            done.wait()
        done.wait()   # raised once
