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
