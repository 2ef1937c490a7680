"""The open-file need of a fabric: counted per item, the limit raised to it or the build
refused up front with the largest size that fits (no fabric is built)."""

from __future__ import annotations

import resource

import pytest

from core.errors import CapabilityError
from emu import fdbudget
from emu.fdbudget import FdNeed, ensure_fd_limit
from topologies.fattree import FatTree, LeafSpine


def test_need_counts_namespaces_marked_ports_and_host_sockets():
    need = FdNeed.of(FatTree(4), bpf_marking=True)
    assert (need.hosts, need.switches) == (16, 20)
    assert need.marked_ports == 2 * 48 - 16  # every link end that is not a host's
    assert need.fabric == (36 * need.per_namespace + 80 * need.per_marked_port
                           + 16 * need.per_host)
    assert FdNeed.of(FatTree(4), bpf_marking=False).marked_ports == 0


def test_iproute_fds_is_measured():
    assert fdbudget.iproute_fds() >= 1  # the netlink socket at least


def test_largest_hosts_of_the_same_shape():
    need = FdNeed.of(LeafSpine(8, 4, 16), bpf_marking=True)
    assert need.largest_hosts(need.fabric) == need.hosts
    assert need.largest_hosts(need.fabric // 2) == need.hosts // 2
    assert need.largest_hosts(0) == 0


@pytest.fixture
def limits(monkeypatch):
    """A fake RLIMIT_NOFILE and kernel ceiling: the process's own limit is not changed."""
    state = {"limit": (1024, 4096), "ceiling": 100_000, "root": True}

    def setrlimit(which, value):
        assert which == resource.RLIMIT_NOFILE
        if value[1] > state["limit"][1] and not state["root"]:
            raise ValueError("not allowed to raise maximum limit")
        state["limit"] = value

    monkeypatch.setattr(fdbudget.resource, "getrlimit", lambda which: state["limit"])
    monkeypatch.setattr(fdbudget.resource, "setrlimit", setrlimit)
    monkeypatch.setattr(fdbudget, "kernel_fd_ceiling", lambda: state["ceiling"])
    monkeypatch.setattr(fdbudget, "_open_fds", lambda: 10)
    return state


def _need(hosts: int) -> FdNeed:
    return FdNeed(hosts=hosts, switches=hosts // 4, marked_ports=hosts * 2, per_namespace=4)


def test_small_fabric_keeps_the_limit(limits):
    assert ensure_fd_limit(_need(10)) == 1024
    assert limits["limit"] == (1024, 4096)


def test_soft_limit_raised_to_the_need_under_the_hard_one(limits):
    need = _need(200)
    assert 1024 < need.total(10) <= 4096
    assert ensure_fd_limit(need) == need.total(10)
    assert limits["limit"] == (need.total(10), 4096)


def test_hard_limit_raised_by_root(limits):
    need = _need(2048)
    assert ensure_fd_limit(need) == need.total(10) > 4096
    assert limits["limit"] == (need.total(10), need.total(10))


def test_refused_without_root_when_over_the_hard_limit(limits):
    limits["root"] = False
    need = _need(2048)
    with pytest.raises(CapabilityError, match=r"over the hard limit \(ulimit -Hn; raising it "
                       r"needs CAP_SYS_RESOURCE\) of 4,096: .* about (\d+) hosts") as err:
        ensure_fd_limit(need)
    assert f"about {need.largest_hosts(4096 - 10 - need.transient):,} hosts" in str(err.value)


def test_refused_over_the_kernel_ceiling_with_the_largest_that_fits(limits):
    limits["ceiling"] = 10_000
    need = _need(2048)
    with pytest.raises(CapabilityError) as err:
        ensure_fd_limit(need)
    fits = need.largest_hosts(10_000 - 10 - need.transient)
    assert 0 < fits < 2048
    assert f"needs {need.total(10):,} open files" in str(err.value)
    assert f"about {fits:,} hosts" in str(err.value)
    assert limits["limit"] == (1024, 4096)
