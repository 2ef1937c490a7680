"""Pure scheduling logic of the engine: dependency counters, deadlines, pacing schedules.

Nothing here reads a clock or touches a socket, so it is unit-tested without root.

* ``DepCounter``: per-message counters of unmet dependencies, decremented when a
  dependency completes; completing a message returns the messages it made ready.
  Nothing is ever rescanned.
* ``Deadlines``: a heap of (time, key) with one live deadline per key; re-arming a
  key makes its older entries stale (skipped when popped), so re-arming is O(log n).
* ``Schedule``: absolute due times of a paced sender. A send behind its due time
  catches up (the average rate stays exact) unless it fell further behind than
  ``max_catchup_ns``: then the schedule restarts from now and the debt it drops
  is recorded (``resets``, ``dropped_ns``) instead of disappearing.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Mapping

__all__ = ["Deadlines", "DepCounter", "Schedule"]


class DepCounter:
    """Unmet-dependency counters of the messages one worker sends.

    ``deps`` maps each message (index) to the indices it waits for, which may be
    messages of any worker. A dependency listed twice counts once.
    """

    __slots__ = ("_unmet", "_children", "_done")

    def __init__(self, deps: Mapping[int, Iterable[int]]):
        self._unmet: dict[int, int] = {}
        self._children: dict[int, list[int]] = {}
        self._done: set[int] = set()
        for msg, ds in deps.items():
            uniq = set(ds)
            self._unmet[msg] = len(uniq)
            for d in uniq:
                self._children.setdefault(d, []).append(msg)

    def ready(self) -> list[int]:
        """Messages with no unmet dependency (call once, at the start)."""
        return sorted(m for m, n in self._unmet.items() if n == 0)

    def complete(self, index: int) -> list[int]:
        """``index`` completed; the messages that became ready (none if seen before)."""
        if index in self._done:
            return []
        self._done.add(index)
        out = []
        unmet = self._unmet
        for child in self._children.pop(index, ()):
            n = unmet[child] - 1
            unmet[child] = n
            if n == 0:
                out.append(child)
        return out

    def unmet(self, index: int) -> int:
        return self._unmet[index]


class Deadlines:
    """Earliest-deadline heap with one live deadline per key."""

    __slots__ = ("_heap", "_armed", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []
        self._armed: dict[Hashable, int] = {}
        self._seq = 0

    def arm(self, key: Hashable, t_ns: int) -> None:
        """``key`` is due at ``t_ns`` (replaces its previous deadline)."""
        if self._armed.get(key) == t_ns:
            return
        self._armed[key] = t_ns
        self._seq += 1
        heapq.heappush(self._heap, (t_ns, self._seq, key))

    def disarm(self, key: Hashable) -> None:
        self._armed.pop(key, None)

    def armed(self, key: Hashable) -> int | None:
        return self._armed.get(key)

    def next_ns(self) -> int | None:
        """The earliest live deadline, or None."""
        heap = self._heap
        armed = self._armed
        while heap:
            t, _, key = heap[0]
            if armed.get(key) == t:
                return t
            heapq.heappop(heap)
        return None

    def pop_next(self) -> Hashable | None:
        """The key of the earliest live deadline (``next_ns``'s), disarmed; None if none.
        One at a time: a worker's loop looks at its clock and rings between two."""
        heap = self._heap
        armed = self._armed
        while heap:
            t, _, key = heapq.heappop(heap)
            if armed.get(key) == t:
                del armed[key]
                return key
        return None

    def __len__(self) -> int:
        return len(self._armed)


class Schedule:
    """Due times of one paced sender, in ns of one clock.

    ``lag(now)`` is how late a send at ``now`` is; ``sent(now, n, step)`` books ``n``
    frames of ``step`` ns each that left at ``now``. Late sends keep the schedule
    (the next frames catch up) unless the sender is more than
    ``max(2 * step, max_catchup_ns)`` behind: then the schedule restarts at ``now``
    and the dropped debt is added to ``dropped_ns`` (one ``reset``).
    """

    __slots__ = ("next_ns", "max_catchup_ns", "resets", "dropped_ns")

    def __init__(self, max_catchup_ns: int, start_ns: int = 0):
        self.next_ns = start_ns
        self.max_catchup_ns = max_catchup_ns
        self.resets = 0
        self.dropped_ns = 0

    def restart(self, now_ns: int) -> None:
        """An idle sender becomes busy: nothing was owed while it had nothing to send."""
        if self.next_ns < now_ns:
            self.next_ns = now_ns

    def sent(self, now_ns: int, n: int, step_ns: int) -> None:
        behind = now_ns - self.next_ns
        if behind >= max(2 * step_ns, self.max_catchup_ns):
            self.resets += 1
            self.dropped_ns += behind
            self.next_ns = now_ns + n * step_ns
        else:
            self.next_ns += n * step_ns
