"""Benchmarks: each measures one part of the emulator beside a reference, in the same run,
and prints both side by side. Run one with ``emu bench NAME [ARGS...]`` or
``python -m bench.NAME [ARGS...]`` (``--help`` after NAME: its options); ``emu bench
--list`` prints the list below. Most build namespaces: run them as root, alone on the
machine.

    capacity          kernel fabric capacity beside the engine's frames/s and CPU per frame, per S
    dragonfly_routing minimal, Valiant and UGAL throughput on a dragonfly beside model/ugal.py
    engine_send       engine packets/s per core beside Scapy's sendp; achieved vs configured pacing
    fuzz              coverage-guided fuzzing (atheris) of the pcap and run-directory readers
    exporter_cost     engine CPU per frame with the live Prometheus exporter scraped beside without
    gate              the gate's verdicts beside the runs' errors: the demo next to CPU hogs, stalls
    lifecycle         fabric build + start + stop time, fabricemu beside stock Mininet
    marker            eBPF marker cost per packet, port throughput with and without it, sampler CPU
    pathdelay         fixed delays held at the sender beside per-link delays where flows meet
    recording         run-directory recording and emu report per case, 200 cases beside 1,000
    ns3ring           ns-3 running the same ring all-reduce: its slowdown beside the emulator's S
    reorder           out-of-order frames per flow, receive steering off beside on
    rxring            receive lag, wake-ups, CPU per frame: the engine's TPACKET_V2 ring beside V3
    shaping_accuracy  achieved beside configured rate (R/S) per tier, and the tier ratios
    stress            quick experiments in a row, one Ctrl-C'd, one killed: what is left behind

``udpflows`` is no benchmark: the sequence-numbered UDP flows ``reorder`` runs in hosts.
A floor of its own (docs/architecture.md): it may import ``experiments`` and everything
below; nothing below imports it.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Sequence

from core.errors import ParameterError

#: name -> what it measures: the list above, the one home of both.
BENCHMARKS: dict[str, str] = dict(re.findall(r"^    (\w+) +(\S.*)$", __doc__ or "", re.M))


def run(name: str, argv: Sequence[str], prog: str | None = None) -> None:
    """Run benchmark ``name``'s ``main`` on ``argv``, parsed by its own argument parser;
    ``prog`` names it in its usage and errors (default ``python -m bench.NAME``)."""
    if name not in BENCHMARKS:
        raise ParameterError("benchmark", name, f"choose one of {', '.join(BENCHMARKS)}")
    module = importlib.import_module(f"{__name__}.{name}")
    saved = sys.argv
    sys.argv = [prog or f"python -m {__name__}.{name}", *argv]
    try:
        module.main()
    finally:
        sys.argv = saved
