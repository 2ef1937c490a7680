"""emu.rtnl against the kernel: its link dump is pyroute2's, the filter it attaches is
the one pyroute2 attaches (as ``tc`` prints both) and runs on every frame the port
sends, and a refused request is a one-line OSError with the kernel's errno."""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess

import pytest

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: builds a network namespace"),
]


def _filters(ns: str, ifname: str) -> str:
    """``tc filter show`` of the port's egress hook, without the program's id."""
    out = subprocess.run(["tc", "-n", ns, "filter", "show", "dev", ifname, "egress"],
                         capture_output=True, text=True, check=True).stdout
    return re.sub(r" id \d+", "", out)


def test_rtnl_dumps_attaches_and_detaches_as_the_kernel_says():
    from emu import bpfload
    from emu.lossledger import counter_source
    from emu.netns import in_netns
    from emu.runs import NamespaceSet

    with NamespaceSet("rtnl test") as scratch:
        # No IPv6: a veth coming up would send its own neighbour discovery.
        ipr = scratch.create("n", {"net.ipv6.conf.all.disable_ipv6": 1,
                                   "net.ipv6.conf.default.disable_ipv6": 1})
        rtnl = scratch.rtnls["n"]
        scratch.veth("n", "by-rtnl", "n", "peer-a")
        scratch.veth("n", "by-pyroute2", "n", "peer-b")
        links = rtnl.links()
        assert links == {link.get_attr("IFLA_IFNAME"): link["index"] for link in ipr.get_links()}

        counts = bpfload.attach_counted(rtnl, links["by-rtnl"], counter_source(), "port_count",
                                        "offered", "fabricemu_count", ingress=False,
                                        what="the port counter")
        try:
            prog_fd, map_fd = bpfload.load_object(
                bpfload.compile_c(counter_source(), "bpf", what="the port counter"),
                "port_count", ("offered",), what="the port counter")
            os.close(map_fd)
            ipr.tc("add", "clsact", links["by-pyroute2"])
            ipr.tc("add-filter", "bpf", links["by-pyroute2"], ":1", fd=prog_fd,
                   name="fabricemu_count", parent=0xFFFFFFF3, classid=1, direct_action=True,
                   prio=bpfload.FILTER_PRIO)
            os.close(prog_fd)
            ns = scratch.name("n")
            assert _filters(ns, "by-rtnl") == _filters(ns, "by-pyroute2") != ""

            with in_netns(scratch.path("n")):
                raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            before = bpfload.read_u64(counts, 0, "offered")
            with raw:
                raw.bind(("by-rtnl", 0))
                for _ in range(5):
                    raw.send(b"\xff" * 6 + b"\x02" * 6 + b"\x88\xb5" + bytes(50))
            assert bpfload.read_u64(counts, 0, "offered") - before == 5

            with pytest.raises(FileExistsError):
                rtnl.add_bpf_filter(links["by-rtnl"], counts, "again", ingress=False,
                                    prio=bpfload.FILTER_PRIO)
            bpfload.detach_clsact(rtnl, links["by-rtnl"], ingress=False)
            assert _filters(ns, "by-rtnl") == ""
            with pytest.raises(OSError) as gone:
                bpfload.detach_clsact(rtnl, links["by-rtnl"], ingress=False)
            assert gone.value.errno == errno.ENOENT
            with pytest.raises(OSError) as missing:
                rtnl.add_clsact(max(links.values()) + 100)
            assert missing.value.errno in (errno.ENODEV, errno.EINVAL)
            assert "\n" not in str(missing.value)
        finally:
            os.close(counts)
