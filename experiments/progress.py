"""Console output while a run goes: a progress bar over its cases, with the case
being measured and an estimate of the time left.

The estimate is the mean wall time of the cases measured so far in this process
times the cases still to go, less what the current case has already taken. Cases a
resumed run kept (advanced without being started) are not measured and do not count.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence

from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from experiments.exporter import current
from experiments.report import console


def eta_s(durations_s: Sequence[float], remaining: int, current_s: float | None = None
          ) -> float | None:
    """Seconds left for ``remaining`` cases (the current one included, running for
    ``current_s``), from the wall times of the finished ``durations_s``; None before
    any case finished."""
    if not durations_s or remaining <= 0:
        return None if remaining > 0 else 0.0
    mean = sum(durations_s) / len(durations_s)
    spent = min(current_s or 0.0, mean)  # a case over the mean is about to end
    return mean * remaining - spent


def format_eta(seconds: float | None) -> str:
    """``~1 min 20 s left``, ``~45 s left``; '' when unknown."""
    if seconds is None:
        return ""
    s = round(seconds)
    if s >= 60:
        return f"~{s // 60} min {s % 60:02d} s left"
    return f"~{s} s left"


class Tracker:
    """The cases of a run: ``start(case)`` before measuring one, ``tracker(case)``
    (advance) when it is done or was kept from an earlier run. A measured case's
    time runs from the previous advance, so a fabric built for it counts too."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[], None] | None = None,
                 on_done: Callable[[str], None] | None = None):
        self.total = total
        self.done = 0
        self.current = ""
        self.durations_s: list[float] = []
        self._clock = clock
        self._since = clock()
        self._on_change = on_change or (lambda: None)
        self._on_done = on_done or (lambda case: None)

    def start(self, case: str) -> None:
        self.current = case
        self._on_change()

    def __call__(self, case: str) -> None:
        now = self._clock()
        if self.current:
            self.durations_s.append(now - self._since)
        self._since = now
        self.done += 1
        self.current = ""
        self._on_change()
        self._on_done(case)

    def eta_s(self) -> float | None:
        current = self._clock() - self._since if self.current else None
        return eta_s(self.durations_s, self.total - self.done, current)


class _StatusColumn(ProgressColumn):
    """``3/20 incast cc=dcqcn ... ~2 min 10 s left``, recomputed at every refresh."""

    def __init__(self, tracker: Tracker):
        super().__init__()
        self.tracker = tracker

    def render(self, task: Task) -> Text:
        t = self.tracker
        parts = [f"{t.done}/{t.total}"]
        if t.current:
            parts.append(t.current)
        eta = format_eta(t.eta_s())
        if eta:
            parts.append(eta)
        return Text("  ".join(parts))


@contextlib.contextmanager
def progress(total: int, description: str) -> Iterator[Tracker]:
    """A rich progress bar over ``total`` cases (in a terminal); yields the Tracker."""
    exporter = current()  # the live Prometheus exporter, when the run serves one
    if exporter is not None:
        exporter.plan(total)
    tracker = Tracker(total, on_change=lambda: bar.update(task, completed=tracker.done),
                      on_done=None if exporter is None else exporter.case_done)
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TimeElapsedColumn(),
                   _StatusColumn(tracker), console=console, transient=False,
                   disable=not console.is_terminal)
    task = bar.add_task(description, total=total)
    with bar:
        yield tracker
