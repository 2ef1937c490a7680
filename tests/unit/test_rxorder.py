"""Receive steering's CPU assignment (emu.rxorder): pure."""

import networkx as nx
import pytest

from emu.rxorder import cpu_masks, cpumask_text, node_cpus, partition_nodes
from topologies.routing import topo_graph
from topologies.spec import build_topo


def test_a_node_receives_on_one_cpu():
    g = nx.path_graph(["h1", "s1", "h2"])
    ifaces = {"s1": [("ns/s1", "s1-eth1"), ("ns/s1", "s1-eth2")], "h1": [("ns/h1", "h1-eth0")],
              "h2": [("ns/h2", "h2-eth0")]}
    masks = cpu_masks(node_cpus(g, [0, 1]), ifaces)
    assert len({masks[k] for k in ifaces["s1"]}) == 1
    assert {m.bit_count() for m in masks.values()} == {1}
    assert {m.bit_length() - 1 for m in masks.values()} == {0, 1}


@pytest.mark.parametrize("parts", [2, 3, 4])
def test_fattree_shares_are_equal_and_cut_few_links(parts):
    g = topo_graph(build_topo("fattree,4"))  # 36 nodes, 48 links
    shares = partition_nodes(g, parts)
    assert sorted(n for s in shares for n in s) == sorted(g.nodes)  # each node once
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1
    part_of = {n: i for i, s in enumerate(shares) for n in s}
    crossing = sum(part_of[a] != part_of[b] for a, b in g.edges)
    # Round-robin would cut about (1 - 1/parts) of the 48 links; a pod is 8 nodes and 12
    # links, so pods kept together cut at most the links to the cores.
    assert crossing <= 16 * (parts - 1), crossing


def test_partition_is_deterministic_and_bad_input_is_refused():
    g = topo_graph(build_topo("leafspine,4,2,4"))
    assert partition_nodes(g, 2) == partition_nodes(g, 2)
    with pytest.raises(ValueError):
        partition_nodes(g, 0)
    with pytest.raises(ValueError):
        node_cpus(g, [])


def test_the_engine_gives_a_host_to_the_worker_on_its_receive_cpu():
    from engine.run import _assign

    loads = {"h1": 10, "h2": 10, "h3": 1, "h4": 1}
    assert _assign(loads, [0, 3], {"h1": 0, "h2": 3, "h3": 0, "h4": 3}) == [["h1", "h3"],
                                                                          ["h2", "h4"]]
    by_load = [["h1", "h3"], ["h2", "h4"]]  # heaviest first onto the least loaded
    assert _assign(loads, [0, 3], {}) == by_load
    # Pinned so that one worker would carry everything (an incast inside a pod): by load.
    assert _assign(loads, [0, 3], dict.fromkeys(loads, 0)) == by_load
    # Aligned unless a worker gets more than 1.25 x the mean: 20 of 22 is too much.
    assert _assign(loads, [0, 3], {"h1": 0, "h2": 0, "h3": 3, "h4": 3}) == by_load
    assert _assign(loads, [0], {"h1": 0, "h2": 3}) == [["h1", "h2", "h3", "h4"]]


def test_masks_are_written_in_32_bit_groups():
    assert cpumask_text(1 << 1) == "2\n"
    assert cpumask_text(1 << 31) == "80000000\n"
    assert cpumask_text(1 << 32) == "1,00000000\n"
    assert cpumask_text(1 << 40 | 1) == "100,00000001\n"
