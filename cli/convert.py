"""`emu convert`: workloads from other formats into fabricemu's DAG files
(docs/workloads.md). Thin: the conversion is traffic.chakra's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

convert_app = typer.Typer(no_args_is_help=True, help="Convert workloads from other formats "
                          "into fabricemu's DAG files (docs/workloads.md).")
console = Console()


@convert_app.command("chakra")
def convert_chakra(
        traces: Annotated[list[str], typer.Argument(help="PREFIX (every PREFIX.<rank>.et) or "
                                                    "the per-rank .et files")],
        out: Annotated[Path, typer.Option("--out", help="the fabricemu-dag/1 file to write")],
        size_scale: Annotated[float, typer.Option("--size-scale", help="every message's bytes "
                                                  "times this (0 < X <= 1)")] = 1.0,
        groups: Annotated[Path | None, typer.Option("--groups", help="JSON: process-group "
                                                    "name -> its ranks (default: every rank)")]
        = None) -> None:
    """Chakra execution traces to a DAG file for `emu run workload --file`."""
    from core.safefile import write_json
    from traffic.chakra import convert_files

    doc = convert_files(traces, size_scale=size_scale, groups_file=groups)
    write_json(out, doc)  # only once the conversion succeeded
    notes = "; ".join(f"{k}: {v}" for k, v in doc["meta"]["notes"].items())
    console.print(f"wrote {escape(str(out))}: {doc['ranks']} ranks, {len(doc['messages'])} "
                  f"messages, {len(doc['ops'])} ops, {len(doc['compute'])} compute segments, "
                  f"size scale {size_scale:g}, {doc['meta']['inexact_waits']} inexact waits"
                  + (f" ({escape(notes)})" if notes else ""))
