"""The switch ports' eBPF markers loaded ahead, in a thread, while the fabric is built.

Loading a marker (`emu.ecn.bpf`: one bpf_object per port, its maps its own) runs the
kernel's verifier, a few ms per port: 2 s for fattree,8's 640 switch ports, in the
build's critical path. libbpf's calls release the GIL, so a thread loads them while
the builder creates the namespaces, links and shapers (pyroute2, Python), on the
other CPU. It loads them all as fast as it can (their program fds are counted in the
build's fd budget, `emu.fdbudget`): a loader held back until the builder reaches the
shapers would load them in the critical path again. The builder takes them in turn,
one per marked port.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import threading

from emu.ecn.bpf import _load, _Loaded, close_loaded, compile_marker


class MarkerPreload:
    """``count`` markers loaded in a thread; `take` the next, `close` the rest."""

    def __init__(self, count: int) -> None:
        self.obj_path = compile_marker()   # here: a compiler's error is the builder's
        self._left = count
        self._ready: queue.Queue[_Loaded | BaseException] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._load, args=(count,), daemon=True,
                                        name="fabricemu-marker-preload")
        self._thread.start()

    def _load(self, count: int) -> None:
        # The verifier gives up (EAGAIN) when its task has a signal pending, and the
        # kernel may hand a process's signal (a lab's SIGALRM time limit) to any thread
        # that does not block it: this one blocks them all, the main thread handles them.
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        for _ in range(count):
            if self._stop.is_set():
                return
            try:
                self._ready.put(_load(self.obj_path, False))
            except BaseException as e:  # noqa: BLE001 - handed to the builder by `take`
                self._ready.put(e)
                return

    def take(self) -> _Loaded:
        """The next loaded marker (what failed to load raises here); loaded here once
        the ``count`` loaded ahead are taken."""
        if self._left == 0:
            return _load(self.obj_path, False)
        self._left -= 1
        item = self._ready.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Stop loading and release whatever was loaded and not taken."""
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(queue.Empty):
            while True:
                item = self._ready.get_nowait()
                if isinstance(item, _Loaded):
                    close_loaded(item)

    def __enter__(self) -> MarkerPreload:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
