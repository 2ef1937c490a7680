"""The cyclic garbage collector paused while a phase builds many long-lived objects.

A fabric's build, the engine's plans and a model's prediction each make hundreds of
thousands of objects that live until the phase ends (tens of thousands of tuples for
a DAG's fluid run), and almost no cyclic garbage: every allocation threshold crossed
starts a collection that walks them all and frees nothing. Those passes took 4.5 s
of a fattree,8 ring's 35 s process (`bench.capacity`, "whole process", with and
without) and a quarter of its pricing. Reference counting frees everything else as
usual; what a phase leaves is collected after it.
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
