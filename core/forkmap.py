"""``forked_map``: a function over items in forked processes, one per CPU, for work
done while the machine is the caller's (the model before a run, the plots after it).

In turn, in the caller, where there is one CPU or one item, or where the caller is a
daemonic process (which may not fork a pool). The workers ignore Ctrl-C and take
SIGTERM's default whatever handler the caller set (the parent handles both, and ends
the pool with SIGTERM); leaving the pool, on an answer or an exception, ends them. One
item at a time goes to a free worker (the model's draws take seconds each). ``fn`` and
the items go to the workers by pickle (a module-level function or a partial of one);
what ``fn`` raises is raised in the caller.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def _quiet_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def forked_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]``, in that order, computed as the module doc says."""
    cpus = len(os.sched_getaffinity(0))
    if len(items) < 2 or cpus < 2 or multiprocessing.current_process().daemon:
        return [fn(x) for x in items]
    with multiprocessing.get_context("fork").Pool(min(cpus, len(items)),
                                                  initializer=_quiet_worker) as pool:
        return pool.map(fn, items, chunksize=1)
