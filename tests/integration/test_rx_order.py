"""Each link delivers a flow in order (emu.rxorder), as a real switch does."""

from __future__ import annotations

import subprocess

import pytest

pytestmark = pytest.mark.root


def _rps_masks(netns_path: str) -> dict[str, int]:
    out = subprocess.run(
        ["nsenter", f"--net={netns_path}", "unshare", "-m", "sh", "-c",
         "mount -t sysfs none /sys && grep . /sys/class/net/*/queues/rx-0/rps_cpus"],
        capture_output=True, text=True, check=True).stdout
    masks = {}
    for line in out.split():
        path, mask = line.rsplit(":", 1)
        masks[path.split("/")[4]] = int(mask.replace(",", ""), 16)
    return masks


def _sysfs_mounts() -> list[str]:
    """This process's sysfs mounts and any scratch directory of ours, from mountinfo."""
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if " - sysfs " in line or "fabemu-sysfs" in line]


def test_every_node_receives_on_one_cpu_and_nothing_leaks():
    from core.scaling import Scale
    from emu.fabric import Fabric
    from topologies.spec import build_topo

    sysfs_before = _sysfs_mounts()
    with Fabric(build_topo("leafspine,2,2,2"), Scale(10000), marking="off", in_order=True) as fab:
        assert fab.summary()["receive_steering"].startswith("rps")
        for node in ("h1", "l1", "s1"):
            masks = _rps_masks(fab.netns_path(node))
            veths = {i.ifname for i in fab.plan.interfaces[node]}
            assert set(masks) == veths | {"lo"}
            assert len({masks[v] for v in veths}) == 1 and masks[min(veths)].bit_count() == 1, masks
    # The scratch sysfs mounts stay in their thread's own mount namespace.
    assert _sysfs_mounts() == sysfs_before


def test_flows_crossing_a_loaded_fattree_arrive_in_order():
    """16 hosts x 4 UDP flows of sequence-numbered datagrams across the pods, both
    CPUs busy forwarding: with receive steering no datagram overtakes an earlier one
    of its flow (without it, a few per 100,000 do: bench.reorder)."""
    from bench.reorder import measure

    m = measure("fattree,4", 1000, in_order=True, flows=4, duration_s=3.0)
    assert m["received"] > 10_000, m  # the load ran
    assert m["out_of_order"] == 0, m
