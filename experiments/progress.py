"""Console output while a run goes: a progress bar over its cases."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from experiments.exporter import current
from experiments.report import console


@contextlib.contextmanager
def progress(total: int, description: str) -> Iterator[Callable[[str], None]]:
    """A rich progress bar over ``total`` cases; yields ``advance(label)``."""
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                   TextColumn("{task.completed}/{task.total} {task.fields[label]}"),
                   TimeElapsedColumn(), console=console, transient=False,
                   disable=not console.is_terminal)
    exporter = current()
    if exporter is not None:
        exporter.plan(total)
    with bar:
        task = bar.add_task(description, total=total, label="")

        def advance(label: str) -> None:
            bar.update(task, advance=1, label=label)
            if exporter is not None:
                exporter.case_done(label)

        yield advance
