"""`emu lab`: list, start, run, check and export the congestion-control labs.

The commands parse and print; ``labs`` does the work. Exit codes of ``check``: 0 every
check passed, 1 a check failed, 3 incomplete (a check the machine could not measure is
ungraded, never failed).
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

lab_app = typer.Typer(no_args_is_help=True, help="Congestion-control labs: handouts, starter "
                      "code and an autograder (docs/labs.md).")
console = Console()

LabArg = Annotated[str, typer.Argument(help="lab number (or name), see `emu lab list`")]
DirArg = Annotated[Path, typer.Argument(help="the student's working folder")]


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _workdir(folder: Path, student_file: str) -> Path:
    """The student's folder, or a one-line error before anything runs."""
    from core.errors import ParameterError

    if not folder.is_dir():
        raise ParameterError("folder", str(folder), "no such folder (start one with "
                             "`emu lab start N DIR`)")
    if not (folder / student_file).is_file():
        raise ParameterError("folder", str(folder), f"holds no {student_file} (start one "
                             "with `emu lab start N DIR`)")
    return folder


def _emulating(emulation: bool) -> None:
    """Claim the machine's one fabric session, as `emu run` does."""
    if emulation:
        from emu.runs import declare_session

        declare_session("emu lab")


@lab_app.command("list")
def list_labs() -> None:
    """The labs, what the student writes, and how long a check takes."""
    from labs.catalog import all_labs

    table = Table(title="fabricemu labs")
    for col in ("#", "lab", "the student writes", "class", "check"):
        table.add_column(col, overflow="fold")
    for lab in all_labs():
        table.add_row(str(lab.number), lab.title, lab.student_writes, f"{lab.class_minutes} min",
                      _minutes(lab.estimate_s()))
    console.print(table)
    console.print("start one: emu lab start N DIR; handouts: labs/labN_*/README.md")


@lab_app.command()
def start(number: LabArg, folder: DirArg) -> None:
    """Copy lab N's starter code and handout into a new folder."""
    from labs.catalog import find_lab
    from labs.workspace import start_lab

    lab = find_lab(number)
    for path in start_lab(lab, folder):
        console.print(f"wrote {escape(str(path))}")
    console.print(f"lab {lab.number}, {lab.title}: read {escape(str(folder / 'HANDOUT.md'))}, "
                  f"fill in the TODOs of {lab.student_file}, then: emu lab check {lab.number} "
                  f"{escape(str(folder))}")


@lab_app.command()
def run(number: LabArg, folder: Annotated[Path, typer.Argument(
        help="the student's working folder")] = Path(".")) -> None:
    """Run lab N's scenarios on your code: run directories and the lab's plots."""
    from labs.catalog import find_lab
    from labs.grader import run_lab
    from labs.workspace import hand_back

    lab = find_lab(number)
    _workdir(folder, lab.student_file)
    _emulating(True)
    out = folder / "runs" / f"lab{lab.number}-{time.strftime('%Y%m%d-%H%M%S')}"
    console.print(f"lab {lab.number}: {sum(s.runs() for s in lab.scenarios)} run(s), about "
                  f"{_minutes(lab.estimate_s() - 5)}; results in {escape(str(out))}")
    try:
        runs, plots = run_lab(lab, folder, out, say=lambda text: console.print(escape(text)))
    finally:
        hand_back([folder / "runs"])
    for name, sr in runs.items():
        if sr.student_error:
            console.print(f"[red]{escape(name)}: {escape(sr.student_error)}[/]")
        elif sr.ungraded:
            console.print(f"[yellow]{escape(name)}: {escape(sr.ungraded)}[/]")
        for r in sr.runs:
            console.print(f"{escape(name)} {escape(str(r.point or ''))}: "
                          f"{'valid' if r.valid else 'INVALID'} {escape(str(r.run_dir))}")
    for path in plots:
        console.print(f"plot: {escape(str(path))}")


@lab_app.command()
def check(number: LabArg,
          folder: Annotated[Path, typer.Argument(help="the student's working folder")] = Path("."),
          emulation: Annotated[bool, typer.Option(
              "--emulation/--no-emulation", help="also run the emulation checks (needs root)")] = True,
          results: Annotated[Path | None, typer.Option(
              "--results", help="where to write results.json (default: FOLDER/results.json)")] = None,
          show_hidden: Annotated[bool, typer.Option(
              "--show-hidden", help="teachers: the feedback of hidden checks too")] = False,
          ) -> None:
    """Grade lab N in FOLDER: points, feedback and a Gradescope results.json."""
    from labs.catalog import find_lab
    from labs.emulation import machine_reason
    from labs.grader import grade
    from labs.workspace import hand_back, write_new_or_replace

    lab = find_lab(number)
    _workdir(folder, lab.student_file)
    runs = emulation and machine_reason() is None
    n_algo = sum(c.kind == "algorithm" for c in lab.checks)
    n_emu = len(lab.checks) - n_algo
    console.print(f"lab {lab.number}, {lab.title}: {n_algo} algorithm check(s)"
                  + (f", {n_emu} emulation check(s) on {sum(s.runs() for s in lab.scenarios)} "
                     f"run(s)" if n_emu else "")
                  + f"; about {_minutes(lab.estimate_s(runs))}")
    _emulating(runs)
    g = grade(lab, folder, emulation=emulation, say=lambda text: console.print(escape(text)))
    # Plain lines, not a table: readable at 80 columns and easy to grep.
    for r in g.results:
        style = {"passed": "green", "failed": "red"}.get(r.outcome.status, "yellow")
        console.print(f"[{style}]{r.outcome.status.upper():8}[/] {r.points:g} / "
                      f"{r.max_points:g}  {escape(r.id)}: {escape(r.title)}")
        if r.feedback(show_hidden):
            console.print(escape(textwrap.fill(r.feedback(show_hidden), max(40, console.width - 1),
                                               initial_indent="    ", subsequent_indent="    ")))
    console.print(f"lab {lab.number}: {g.verdict}, {g.score:g} of {g.max_score:g} points")
    for note in g.notes:
        console.print(escape(note))
    path = results or folder / "results.json"
    write_new_or_replace(path, g.results_json(show_hidden))
    hand_back([path, folder / "runs"])
    console.print(f"results: {escape(str(path))} ({_minutes(g.seconds)})")
    if g.verdict == "FAILED":
        raise typer.Exit(1)
    if g.verdict == "INCOMPLETE":
        console.print("[yellow]incomplete: the ungraded checks are not failures; run the "
                      "check again on a quieter machine (or as root for the emulation)[/]")
        raise typer.Exit(3)


@lab_app.command()
def export(folder: Annotated[Path, typer.Argument(help="a new folder for the student pack")]) -> None:
    """Write the student pack: the whole project without any lab's solution/."""
    from labs.workspace import export_pack

    files = export_pack(folder)
    console.print(f"wrote {len(files)} files to {escape(str(folder))} (no solutions); "
                  "students start with: emu lab list")
