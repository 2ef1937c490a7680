"""``forked_map``: a function over items in forked processes, one per CPU, for work
done while the machine is the caller's (the model before a run, the plots after it);
``Background``: one call in a forked process while the caller goes on (a finished
case's record written while the run's own files are).

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

from core.errors import FabricEmuError

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


class Background:
    """``fn()`` in a forked child while the caller goes on; in turn, here, where there
    is one CPU. `wait` returns once it has ended and raises what it raised, as a
    FabricEmuError with its message. The child blocks SIGINT, SIGTERM and SIGHUP (what
    it writes is finished, whoever stops the caller: the caller waits for it on its
    way out) and closes every descriptor it inherited but its pipe (a fabric's netlink
    sockets and BPF maps are not kept alive by it); it leaves by ``os._exit``, running
    none of the caller's exit handlers."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self._pid: int | None = None
        self._error: str | None = None
        if len(os.sched_getaffinity(0)) < 2:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - raised by wait, as in the child's case
                self._error = _describe(e)
            return
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM,
                                                          signal.SIGHUP})
                os.closerange(3, write_fd)
                os.closerange(write_fd + 1, os.sysconf("SC_OPEN_MAX"))
                fn()
                code = 0
            except BaseException as e:  # noqa: BLE001 - reported to the caller
                os.write(write_fd, _describe(e).encode(errors="replace")[:65536])
            finally:
                os._exit(code)
        os.close(write_fd)
        self._pid, self._read_fd = pid, read_fd

    def wait(self) -> None:
        """Block until the call has ended; raise what it raised."""
        if self._pid is not None:
            chunks = []
            while chunk := os.read(self._read_fd, 65536):
                chunks.append(chunk)
            os.close(self._read_fd)
            _, status = os.waitpid(self._pid, 0)
            self._pid = None
            if chunks or os.waitstatus_to_exitcode(status) != 0:
                self._error = (b"".join(chunks).decode(errors="replace")
                               or f"the writer ended with status {status}")
        if self._error is not None:
            error, self._error = self._error, None
            raise FabricEmuError(error)


def _describe(e: BaseException) -> str:
    return str(e) if isinstance(e, FabricEmuError) else f"{type(e).__name__}: {e}"
