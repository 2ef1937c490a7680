"""The common ``faults`` option at work: every case of a run fails as ``faults`` says.

`planned` (the runner, around an experiment's execute) names the run's faults, their
detection delay and hold-down; `with_faults` (``experiments.measure.measure``, for each case it runs)
checks them against the case (nodes and links on its fabric, every fault starting
before the case's modelled end) and applies them with an `emu.faultinject.FaultInjector`
whose ``watch`` is the run's ``during`` hook, and keeps the applied events and the
frames they cost (which the fidelity gate counts as drops) with what the case
measured. A caller that brings its own injector (`emu run failure`, one per case)
passes ``during`` itself and the plan stays out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from core.errors import FabricEmuError
from emu.faultinject import FaultInjector, require_faults_supported
from model.alphabeta import predict_workload
from topologies.faultspec import Fault, check_times, format_faults, parse_faults, resolve

#: The faults of the run going on, their detection delay and hold-down (real s).
_PLAN: ContextVar[tuple[tuple[Fault, ...], float, float]] = ContextVar(
    "fabricemu_faults", default=((), 0.0, 0.0))


@contextmanager
def planned(faults: Any, detect_delay_s: float, holddown_s: float = 0.0) -> Iterator[None]:
    """Every case measured inside fails as ``faults`` (the option's text) says."""
    token = _PLAN.set((tuple(parse_faults(faults)), detect_delay_s, holddown_s))
    try:
        yield
    finally:
        _PLAN.reset(token)


@contextmanager
def injected(fab: Any, workload: Any, graph: Any) -> Iterator[FaultInjector | None]:
    """The planned faults ready to apply to one case of ``workload`` on ``fab`` (None if
    there are none); ``graph``: the model's graph of ``fab``, which gives the case's
    length. ParameterError (one line) for a node or link ``fab`` lacks or a fault that
    starts after the case ends; the fabric is restored when the case ends."""
    faults, detect_delay_s, holddown_s = _PLAN.get()
    if not faults:
        yield None
        return
    require_faults_supported(faults)
    resolved = resolve(faults, fab.topo, fab.topo.describe())
    ends_s = predict_workload(workload, graph, fab.routes.paths).completion_s
    check_times([f for f in resolved if f.kind != "up"], ends_s, f"{workload.name} (model)")
    injector = FaultInjector(fab, resolved, detect_delay_s, holddown_s)
    try:
        yield injector
    finally:
        injector.restore()
    if injector.error:
        raise FabricEmuError(f"faults {format_faults(resolved)} could not be applied: "
                             f"{injector.error}")


def with_faults(fab: Any, workload: Any, graph: Any, run: Callable[[Any], Any]) -> Any:
    """``run(hook)``'s measurement of one case of ``workload`` with the planned faults
    applied through ``hook`` (None: none planned), their events in its ``fault_events``
    and the frames they cost in its ``failure_drops``."""
    with injected(fab, workload, graph) as injector:
        m = run(injector.watch if injector is not None else None)
        if injector is not None:
            m.failure_drops = injector.lost_frames().total
            m.links_down = injector.links_taken_down()
    if injector is not None:
        m.fault_events = injector.events()
    return m
