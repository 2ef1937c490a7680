"""The engine's pure scheduling logic: dependency counters, deadline heap, pacing schedule,
and the completion-ring layout that carries completions between workers."""

from __future__ import annotations

from engine.plan import MsgPlan, completion_layout
from traffic.pacing import Deadlines, DepCounter, Schedule
from traffic.roce import Flow

FLOW = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 0xC001, 1)


def test_dep_counter_releases_a_message_when_its_last_dependency_completes():
    deps = DepCounter({10: (), 11: (1, 2), 12: (2, 2), 13: (11,)})
    assert deps.ready() == [10]
    assert deps.complete(1) == []
    assert deps.unmet(11) == 1
    assert deps.complete(2) == [11, 12]      # 12 listed 2 twice: it counts once
    assert deps.complete(2) == []            # a completion seen twice changes nothing
    assert deps.complete(99) == []           # nobody here waits for 99
    assert deps.complete(11) == [13]


def test_deadlines_keep_one_live_deadline_per_key():
    d = Deadlines()
    d.arm("a", 30)
    d.arm("b", 10)
    d.arm("a", 5)                            # re-armed earlier: the 30 entry is stale
    assert d.next_ns() == 5
    assert [d.pop_next(), d.pop_next()] == ["a", "b"]
    assert d.next_ns() is None and len(d) == 0 and d.pop_next() is None
    d.arm("c", 50)
    d.arm("c", 70)                           # re-armed later: the 50 entry is stale
    assert d.next_ns() == 70 and d.armed("c") == 70
    d.arm("e", 70)                           # a tie goes in the order armed
    assert [d.pop_next(), d.pop_next()] == ["c", "e"]
    d.arm("f", 80)
    d.disarm("f")
    assert d.pop_next() is None and d.next_ns() is None


def test_schedule_catches_up_small_lag_and_records_dropped_debt():
    s = Schedule(max_catchup_ns=1000, start_ns=0)
    s.sent(now_ns=0, n=1, step_ns=100)
    assert s.next_ns == 100
    s.sent(now_ns=400, n=1, step_ns=100)      # 300 late: kept, the next frames catch up
    assert s.next_ns == 200 and s.resets == 0
    s.sent(now_ns=5200, n=2, step_ns=100)     # 5000 behind > max(2 steps, 1000): restart
    assert s.next_ns == 5400
    assert s.resets == 1 and s.dropped_ns == 5000
    s.restart(now_ns=9000)                    # idle in between: nothing owed
    assert s.next_ns == 9000
    s.restart(now_ns=100)                     # a restart never moves the schedule back
    assert s.next_ns == 9000


def _msg(index: int, src: str, dst: str, deps: tuple[int, ...] = ()) -> MsgPlan:
    return MsgPlan(index, index, src, dst, 100, deps, 0, FLOW, FLOW, "eth0", "eth0")


def test_completion_layout_announces_only_to_other_workers_that_wait():
    # h0, h1 on worker 0; h2 on worker 1. Message 0 (h0->h1) completes on worker 0;
    # 1 (h2->h0) waits for it on worker 1. Message 2 (h1->h2) completes on worker 1;
    # 3 (h0->h1) waits for it and for 0 on worker 0.
    msgs = [_msg(0, "h0", "h1"), _msg(1, "h2", "h0", (0,)), _msg(2, "h1", "h2"),
            _msg(3, "h0", "h1", (0, 2))]
    notify, slices = completion_layout(msgs, {"h0": 0, "h1": 0, "h2": 1})
    assert notify == {0: (1,), 2: (0,)}
    assert slices == {(0, 1): (0, 1), (1, 0): (1, 1)}
