"""In-order delivery on veth links: each node's receive work pinned to one CPU (RPS).

A veth without NAPI hands each frame to the backlog of the CPU that transmitted it.
A switch port's qdisc is dequeued by whichever CPU runs it at that moment (its
timer, or another flow's enqueue), so two consecutive frames of one flow can land
in two CPUs' backlogs and overtake each other at the next hop. Real switches never
reorder a flow; go-back-N turns every reordering into a NAK and a retransmission.
(Measured by ``emu bench reorder``: a few out-of-order frames per
300,000 on a loaded fattree,4 without this, none with it.)

Receive Packet Steering on the receiving veth puts every frame of that interface
into one CPU's backlog, whichever CPU sent it, so each link delivers in order. All
interfaces of one node share a CPU: a switch then forwards on one CPU, as an ASIC's
pipeline handles its frames one after another, so its egress programs (the ECN
marker's virtual queue, the INT records' byte counters) see frames in the order they
join the queues. The nodes are split over the CPUs in equal shares with few links
between the shares (a frame crossing to another CPU costs an interrupt).

``rps_cpus`` is a sysfs attribute of the interface's own namespace, written with
``emu.netns.write_netns_sysfs`` (no fork per namespace).
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx

from core.errors import CapabilityError
from emu.netns import write_netns_sysfs


def partition_nodes(graph: nx.Graph, parts: int) -> list[set[str]]:
    """Split ``graph``'s nodes into ``parts`` sets of (nearly) equal size with few
    links between them: recursive Kernighan-Lin bisection, each split starting from
    a breadth-first cut (neighbours together) with sizes in proportion to the parts
    on each side. Deterministic."""
    if parts < 1:
        raise ValueError("parts must be at least 1")
    nodes = sorted(graph.nodes)
    if parts == 1 or len(nodes) <= 1:
        return [set(nodes)] + [set() for _ in range(parts - 1)]
    left_parts = parts // 2
    order = list(nx.bfs_tree(graph, nodes[0])) if nx.is_connected(graph) else nodes
    seen = set(order)
    order += [n for n in nodes if n not in seen]
    cut = round(len(order) * left_parts / parts)
    a, b = nx.algorithms.community.kernighan_lin_bisection(
        graph, partition=(set(order[:cut]), set(order[cut:])), seed=0)
    if len(a) != cut:  # the sides keep their sizes, not necessarily their order
        a, b = b, a
    return (partition_nodes(graph.subgraph(a), left_parts)
            + partition_nodes(graph.subgraph(b), parts - left_parts))


def node_cpus(graph: nx.Graph, cpus: Sequence[int]) -> dict[str, int]:
    """The CPU each node's receive work runs on: ``graph``'s nodes split over ``cpus``
    by `partition_nodes`, in equal shares with few links whose two ends are on
    different CPUs (a frame crossing one costs an inter-processor interrupt)."""
    if not cpus:
        raise ValueError("no CPU to pin to")
    parts = partition_nodes(graph, len(cpus))
    return {node: cpu for cpu, part in zip(cpus, parts, strict=True) for node in part}


def cpu_masks(cpu_of: dict[str, int], ifaces: dict[str, Sequence[tuple[str, str]]]
              ) -> dict[tuple[str, str], int]:
    """(netns path, ifname) -> the one-CPU mask of its receive work: all of a node's
    interfaces (``ifaces[node]``) on its CPU, so the node forwards on one CPU, like a
    switch's single pipeline."""
    return {key: 1 << cpu_of[node] for node, keys in ifaces.items() for key in keys}


def cpumask_text(mask: int) -> str:
    """A CPU mask as sysfs takes it: hex in comma-separated 32-bit groups, the most
    significant first (CPU 32 alone is ``1,00000000``)."""
    groups = [mask & 0xFFFFFFFF]
    while mask >> 32:
        mask >>= 32
        groups.append(mask & 0xFFFFFFFF)
    return ",".join([f"{groups[-1]:x}"] + [f"{g:08x}" for g in reversed(groups[:-1])]) + "\n"


def pin_receive_cpus(masks: dict[tuple[str, str], int]) -> None:
    """Write each interface's RPS mask inside its namespace; raises CapabilityError
    when the kernel has no RPS (no ``rps_cpus`` attribute)."""
    files: dict[str, dict[str, str]] = {}
    for (ns, ifname), mask in masks.items():
        files.setdefault(ns, {})[f"class/net/{ifname}/queues/rx-0/rps_cpus"] = cpumask_text(mask)
    try:
        write_netns_sysfs(files)
    except FileNotFoundError as e:
        raise CapabilityError(f"no RPS on this kernel ({e.filename} missing): veth links "
                              "may reorder frames") from None
