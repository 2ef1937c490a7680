"""The cyclic garbage collector paused while a phase builds many long-lived objects.

A fabric's build, the engine's plans and the model's pricing each make hundreds of
thousands of objects that live on, and almost no cyclic garbage; the collector's
passes over that growing heap took 4.5 s of a fattree,8 ring's 35 s process
(`bench.capacity`, "whole process", with and without). Reference counting frees
everything else as usual; the collector resumes when the phase ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The body runs without the cyclic collector; its state before is restored after
    (nested phases leave it paused until the outermost ends)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
