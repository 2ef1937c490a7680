"""Completions between workers: the completion rings of ``engine.plan`` and the
eventfd that wakes a worker when another one writes to its ring.

A worker that fully received a message announces it to every worker that sends a
dependant of it (``announce``: the message's index and receive time into the ring
slice of that pair, then that worker's eventfd). The reader's eventfd is a source of
its loop (``fire``): it drains its inbound slices and posts what waited
(``Requester.completed``).
"""

from __future__ import annotations

import os

from engine.books import Books
from engine.requester import Requester
from engine.sources import Source


class Completions(Source):
    def __init__(self, books: Books, requester: Requester):
        self.books = books
        self.requester = requester
        plan = books.plan
        self.fd = books.shared.wake_fds[plan.worker]
        # Completion rings this worker reads: (count slot, offset, cursor) per writer.
        n = plan.n_workers
        self.inbound = [[wr * n + plan.worker, off, 0]
                        for (wr, rd), (off, _) in sorted(plan.ring_slices.items())
                        if rd == plan.worker]
        self.outbound = {rd: [plan.worker * n + rd, off, 0]
                         for (wr, rd), (off, _) in plan.ring_slices.items() if wr == plan.worker}
        self.all_acked = False

    def announce(self, index: int, done_ns: int) -> None:
        """Tell the workers that send dependents of ``index`` (completion ring + eventfd)."""
        shared = self.books.shared
        for reader in self.books.plan.notify.get(index, ()):
            slot = self.outbound[reader]
            shared.ring[slot[1] + slot[2]] = index
            shared.ring_done_ns[slot[1] + slot[2]] = done_ns
            slot[2] += 1
            shared.ring_count[slot[0]] = slot[2]  # published after the entry
            os.eventfd_write(shared.wake_fds[reader], 1)

    def fire(self, now: int) -> None:
        """The eventfd: another worker completed something, or everything is acknowledged."""
        os.eventfd_read(self.fd)
        shared = self.books.shared
        ring = shared.ring
        done = shared.ring_done_ns
        count = shared.ring_count
        for slot in self.inbound:
            c = count[slot[0]]
            for k in range(slot[2], c):
                self.requester.completed(ring[slot[1] + k], done[slot[1] + k], now)
            slot[2] = c
        if not self.all_acked and sum(shared.acked) >= self.books.plan.n_messages:
            self.all_acked = True
