"""Lab 2's reference values: the scenario fabric as the experiment resolves it, every
switch egress port with the ports feeding it, and PFC's headroom and ceilings as the
project's model (``traffic.pfc``) computes them, which is what the emulator enforces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The largest frame a port sends (9000 B MTU + 14 B header), as the emulator counts it
#: (emu.pfcgate.FRAME_MAX_BYTES): what a paused port still finishes.
FRAME_BYTES = 9014
Feeders = list[tuple[float, float]]


def egress_feeders(topo_spec: str) -> dict[str, Feeders]:
    """Every switch egress port ("s1->l3") of ``topo_spec`` and the (rate_bps,
    link_delay_s) of the ports whose traffic its routes send out of it: the ports a
    full queue there pauses (docs/pfc.md, "Which ports a congested queue pauses")."""
    from topologies.routing import compute_routes
    from topologies.spec import build_topo
    from traffic.pfc import feeders

    topo = build_topo(topo_spec)
    next_hops = compute_routes(topo).next_hops
    neighbours: dict[str, list[str]] = {}
    for a, b in topo.links():
        neighbours.setdefault(a, []).append(b)
        neighbours.setdefault(b, []).append(a)
    out: dict[str, Feeders] = {}
    for switch in sorted(topo.switch_nodes()):
        for peer in sorted(neighbours[switch]):
            feed = sorted(feeders(next_hops, switch, peer, neighbours[switch]))
            out[f"{switch}->{peer}"] = [(float(topo.linkInfo(n, switch)["rate_bps"]),
                                         float(topo.linkInfo(n, switch).get("delay_s") or 0.0))
                                        for n in feed]
    return out


def exact_headroom(feeders: Feeders, reaction_s: float, frame_bytes: int = FRAME_BYTES) -> float:
    """The definition, unrounded: sum of rate x (reaction + 2 x delay) / 8 + one frame."""
    return sum(rate / 8 * (reaction_s + 2 * delay) + frame_bytes for rate, delay in feeders)


def ceilings(ports: dict[str, Feeders], buffer_bytes: int, reaction_s: float) -> dict[str, int]:
    """buffer - headroom of every port, as the emulator plans it (whole bytes)."""
    from traffic.pfc import headroom_bytes

    return {name: buffer_bytes - headroom_bytes(feed, reaction_s, FRAME_BYTES)
            for name, feed in ports.items()}


def scenario_fabric(scenario_name: str) -> dict[str, Any]:
    """The fabric of this lab's scenario as the experiment resolves its options:
    topology, buffer, S and PFC's wall-clock reaction budget."""
    from experiments.options import resolve_typed
    from experiments.registry import EXPERIMENTS
    from labs.catalog import load_lab

    scenario = load_lab(Path(__file__).resolve().parent).scenario(scenario_name)
    module = EXPERIMENTS[scenario.experiment]
    given = {k: v for k, v in scenario.settings.items() if k not in ("xoff", "xon")}
    _, opts = resolve_typed(module.Options, module.OPTIONS, scenario.quick, given)
    return {"topo": opts.topo, "buffer_bytes": int(opts.buffer),
            "scale": float(opts.scale), "budget_wall_s": float(opts.pfc_budget)}
