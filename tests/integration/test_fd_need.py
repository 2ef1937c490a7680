"""A live fabric holds the descriptors ``emu.fdbudget`` computes for it: not more (the
limit raised up front would be too low: EMFILE mid-build) and not many fewer (the need
stated would be wrong). A k=4 fat-tree, a few seconds."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.root


def test_a_fabric_holds_what_its_fd_need_counts():
    from core.scaling import Scale
    from emu import fdbudget
    from emu.fabric import Fabric
    from emu.reachability import ping_all
    from topologies.fattree import FatTree

    topo = FatTree(4)
    fdbudget.iproute_fds()  # measured first: its shared event loop is not the fabric's
    before = fdbudget._open_fds()
    with Fabric(topo, Scale(4000), marking="auto") as fab:
        held = fdbudget._open_fds() - before
        need = fdbudget.FdNeed.of(topo, bpf_marking=fab.marking == "bpf")
        unopened = need.hosts * need.per_host  # pingall's and the traffic's sockets
        assert need.fabric - unopened <= held <= need.fabric, need.describe()
        result = ping_all([(h, fab.netns_path(h), fab.plan.host_ip[h]) for h in fab.hosts])
        assert all(result.values())
