"""What `emu topo show` reports about a topology, computed without building it."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

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


def draw_topology(topo: FabricTopo, path: Path) -> None:
    """Layered drawing: hosts at the bottom, each switch tier a row above;
    FabricEmuError (one line) if the file cannot be written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    g = topo_graph(topo)
    for node in g.nodes:
        g.nodes[node]["layer"] = topo.nodeInfo(node).get("tier", 0)
    pos = nx.multipartite_layout(g, subset_key="layer", align="horizontal")
    fig, ax = plt.subplots(figsize=(max(8, len(g) / 6), 6))
    widths = [0.5 + g.edges[e]["rate_bps"] / 400e9 for e in g.edges]
    colors = ["tab:blue" if topo.role(n) == "host" else "tab:orange" for n in g.nodes]
    nx.draw_networkx(g, pos, ax=ax, node_size=120, font_size=5, width=widths,
                     node_color=colors, edge_color="grey")
    ax.set_title(f"{topo.describe()}  (edge width ~ link rate)")
    ax.axis("off")
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=150)
    finally:
        plt.close(fig)
