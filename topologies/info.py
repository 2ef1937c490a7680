"""What `emu topo show` reports about a topology, computed without building it."""

from __future__ import annotations

import math
import re
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

from core.errors import ParameterError
from core.safefile import save_figure
from core.scaling import Scale
from topologies.base import FabricTopo, TopoSize
from topologies.routing import bisection_bandwidth_bps, diameter_hops, topo_graph


def describe_topology(topo: FabricTopo, scale: Scale) -> dict:
    tiers: dict[tuple[str, float, int], int] = defaultdict(int)
    for a, b in topo.links():
        info = topo.linkInfo(a, b)
        tiers[(info["tier"], info["rate_bps"], info["buffer_bytes"])] += 1
    return {
        "topology": topo.describe(),
        "family": topo.family,
        "params": topo.params(),
        "routing": topo.routing,
        "hosts": len(topo.host_nodes()),
        "switches": len(topo.switch_nodes()),
        "links": len(list(topo.links())),
        "scale": scale.factor,
        "tiers": [
            {"tier": tier, "links": n, "rate_bps": rate, "rate_emu_bps": scale.rate_emu_bps(rate),
             "buffer_bytes": buf}
            for (tier, rate, buf), n in sorted(tiers.items(), key=lambda kv: kv[0][1])
        ],
        "bisection_bps": bisection_bandwidth_bps(topo),
        "diameter_hops": diameter_hops(topo),
    }


#: Largest topology drawn: beyond this the labels overlap and the figure gets huge.
MAX_DRAW_NODES = 512


def check_drawing(size: TopoSize, path: Path) -> None:
    """Refuse, before anything is built, a drawing that cannot be made: too many
    nodes, an image format matplotlib does not write, a directory that is missing."""
    from matplotlib.backend_bases import FigureCanvasBase

    nodes = size.hosts + size.switches
    if nodes > MAX_DRAW_NODES:
        raise ParameterError("--png", str(path), f"the topology has {nodes} nodes; drawings "
                                                 f"are limited to {MAX_DRAW_NODES}")
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in formats:
        raise ParameterError("--png", str(path), "the file name must end in one of "
                                                 + ", ".join(f".{f}" for f in sorted(formats)))
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir() or not parent.is_dir():
        raise ParameterError("--png", str(path), "is a directory" if path.is_dir()
                             else f"the directory {parent} does not exist")


def _natural(name: str) -> tuple:
    """Sort key reading the numbers in a node name as numbers (h2 before h10)."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _spread(ordered: list[str], y: float, width: float) -> dict[str, tuple[float, float]]:
    """``ordered`` evenly across ``width`` at height ``y``."""
    return {n: ((i + 0.5) * width / len(ordered), y) for i, n in enumerate(ordered)}


def _tiered_layout(topo: FabricTopo, g: Any) -> dict[str, tuple[float, float]]:
    """Hosts at the bottom (grouped by rail where they have one, so a rail's GPUs sit
    under their rail leaf), each switch tier a row above, every switch ordered by the
    mean position of its neighbours below (few crossings); NVSwitches under their
    server's GPUs."""
    def layer(n: str) -> int:
        return -1 if topo.role(n) == "nvswitch" else int(topo.nodeInfo(n).get("tier", 0))

    layers: dict[int, list[str]] = defaultdict(list)
    for n in g.nodes:
        layers[layer(n)].append(n)
    width = float(max(len(v) for v in layers.values()))
    hosts = sorted(layers[0], key=lambda n: (topo.nodeInfo(n).get("rail", 0), _natural(n)))
    pos = _spread(hosts, 0.0, width)
    for tier in sorted(t for t in layers if t != 0):
        def centre(n: str) -> tuple[float, tuple]:
            xs = [pos[m][0] for m in g.neighbors(n) if m in pos]
            return (sum(xs) / len(xs) if xs else width / 2, _natural(n))
        pos.update(_spread(sorted(layers[tier], key=centre), float(tier), width))
    return pos


def _torus_layout(topo: FabricTopo, g: Any) -> dict[str, tuple[float, float]]:
    """Switches on their coordinates' grid (a 3-D torus as its z planes side by side),
    each host beside its switch."""
    pos: dict[str, tuple[float, float]] = {}
    switches = [n for n in g.nodes if topo.role(n) != "host"]
    dims = [max(topo.nodeInfo(n)["coord"][i] for n in switches) + 1
            for i in range(len(topo.nodeInfo(switches[0])["coord"]))]
    for n in switches:
        c = topo.nodeInfo(n)["coord"]
        pos[n] = (3.0 * (c[0] + (c[2] * (dims[0] + 1) if len(c) > 2 else 0)),
                  3.0 * (c[1] if len(c) > 1 else 0))
    for sw in switches:
        hosts = sorted((m for m in g.neighbors(sw) if topo.role(m) == "host"), key=_natural)
        for j, h in enumerate(hosts):
            angle = math.pi / 4 + j * 2 * math.pi / max(len(hosts), 1)
            pos[h] = (pos[sw][0] + 0.9 * math.cos(angle), pos[sw][1] + 0.9 * math.sin(angle))
    return pos


def _group_layout(topo: FabricTopo, g: Any) -> dict[str, tuple[float, float]]:
    """Dragonfly groups around a circle, each group's routers side by side on it, hosts
    outside their router."""
    switches = sorted((n for n in g.nodes if topo.role(n) != "host"),
                      key=lambda n: (topo.nodeInfo(n)["group"], _natural(n)))
    groups = sorted({topo.nodeInfo(n)["group"] for n in switches})
    per_group = max(sum(1 for n in switches if topo.nodeInfo(n)["group"] == grp)
                    for grp in groups)
    step = 2 * math.pi / len(groups) / (per_group + 1)
    pos: dict[str, tuple[float, float]] = {}
    for grp in groups:
        members = [n for n in switches if topo.nodeInfo(n)["group"] == grp]
        for i, n in enumerate(members):
            angle = 2 * math.pi * groups.index(grp) / len(groups) \
                + (i - (len(members) - 1) / 2) * step
            pos[n] = (10 * math.cos(angle), 10 * math.sin(angle))
            hosts = sorted((m for m in g.neighbors(n) if topo.role(m) == "host"), key=_natural)
            for j, h in enumerate(hosts):
                a = angle + (j - (len(hosts) - 1) / 2) * step / max(len(hosts), 1)
                pos[h] = (13 * math.cos(a), 13 * math.sin(a))
    return pos


def topology_layout(topo: FabricTopo) -> tuple[Any, dict[str, tuple[float, float]]]:
    """The graph and its drawing positions: a torus on its grid, a dragonfly's groups
    around a circle, anything else by tier (hosts below, each switch tier above)."""
    g = topo_graph(topo)
    infos = [topo.nodeInfo(n) for n in g.nodes if topo.role(n) != "host"]
    if infos and all("coord" in i for i in infos):
        return g, _torus_layout(topo, g)
    if infos and all("group" in i for i in infos):
        return g, _group_layout(topo, g)
    return g, _tiered_layout(topo, g)


def draw_topology(topo: FabricTopo, path: Path) -> None:
    """The topology laid out by tier, grid or group (`topology_layout`); a torus's
    wrap-around links (and a 3-D torus's links between its z planes) curve. FabricEmuError (one line) if the file
    cannot be written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    g, pos = topology_layout(topo)
    xs, ys = [p[0] for p in pos.values()], [p[1] for p in pos.values()]
    span_x, span_y = max(xs) - min(xs) or 1.0, max(ys) - min(ys) or 1.0
    width = min(30.0, max(8.0, len(g) / 5)) if span_x > 2 * span_y else 10.0
    fig, ax = plt.subplots(figsize=(width, min(20.0, max(5.0, width * span_y / span_x))))
    colors = {"host": "tab:blue", "nvswitch": "tab:green"}
    straight, curved = [], []
    for a, b in g.edges:
        ca, cb = topo.nodeInfo(a).get("coord"), topo.nodeInfo(b).get("coord")
        # A wrap-around link, or one between a 3-D torus's z planes (drawn side by
        # side), would run straight through the switches between its ends.
        arc = ca is not None and cb is not None and topo.role(a) != "host" \
            and topo.role(b) != "host" and (
                max(abs(x - y) for x, y in zip(ca, cb, strict=True)) > 1
                or ca[2:] != cb[2:])
        (curved if arc else straight).append((a, b))
    def widths(edges: list[tuple[str, str]]) -> list[float]:
        # Logarithmic: 400G 1.2, 800G 2.0, 3.6T NVLink 3.7 points.
        return [0.4 + 0.8 * math.log2(max(g.edges[e]["rate_bps"] / 200e9, 1.0)) for e in edges]

    if straight:
        nx.draw_networkx_edges(g, pos, edgelist=straight, ax=ax, edge_color="grey",
                               width=widths(straight))
    if curved:
        nx.draw_networkx_edges(g, pos, edgelist=curved, ax=ax, edge_color="grey",
                               width=widths(curved), arrows=True, arrowstyle="-",
                               connectionstyle="arc3,rad=0.25")
    nx.draw_networkx_nodes(g, pos, ax=ax, node_size=110,
                           node_color=[colors.get(topo.role(n), "tab:orange") for n in g.nodes])
    nx.draw_networkx_labels(g, pos, ax=ax, font_size=5)
    nvswitches = any(topo.role(n) == "nvswitch" for n in g.nodes)
    ax.set_title(textwrap.fill(f"{topo.describe()}  (edge width ~ log link rate; blue hosts, "
                               "orange switches" + (", green NVSwitches" if nvswitches else "")
                               + ")", int(width * 11)),
                 fontsize=9)
    ax.axis("off")
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=150)
    finally:
        plt.close(fig)
