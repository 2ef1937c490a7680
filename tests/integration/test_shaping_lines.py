"""A port shaped by tc lines (emu.shaping.port_lines, what a fabric uses) is the port
shape_port makes through pyroute2: the same qdiscs and HTB class in the kernel, field
for field, as `tc -d -j` prints them."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: builds a network namespace"),
]


def _tc(ns: str, what: str, ifname: str, *, as_json: bool = False) -> str:
    # Debian 12's tc prints an HTB class as text even with -j.
    return subprocess.run(["tc", "-n", ns, "-d", *(["-j"] if as_json else []), what, "show",
                           "dev", ifname], capture_output=True, text=True, check=True).stdout


def _config(text: str) -> str:
    """tc's text without HTB's count of unclassified packets: the kernel's own IPv6 chatter
    on a veth that came up can pass before the class exists, on one side and not the other."""
    return re.sub(r"direct_packets_stat \d+ ", "", text)


@pytest.mark.parametrize(("rate_emu_bps", "buffer_bytes", "overhead_bytes"),
                         [(20e6, 2_000_000, 24), (1.25e6, 100_000, 0), (2.4e9, 32 << 20, 24)])
def test_port_lines_make_the_kernel_state_shape_port_makes(rate_emu_bps, buffer_bytes,
                                                          overhead_bytes):
    from emu.ipbatch import run_ip_batches
    from emu.runs import NamespaceSet
    from emu.shaping import port_lines, shape_port

    with NamespaceSet("shaping lines test") as scratch:
        ipr = scratch.create("n")
        scratch.veth("n", "by-netlink", "n", "by-lines")
        index = ipr.link_lookup(ifname="by-netlink")[0]
        shape_port(ipr, index, rate_emu_bps, buffer_bytes, overhead_bytes=overhead_bytes)
        ns = scratch.name("n")
        run_ip_batches({ns: port_lines("by-lines", rate_emu_bps, buffer_bytes, overhead_bytes)},
                       tool="tc")
        for what in ("qdisc", "class"):
            assert _config(_tc(ns, what, "by-netlink")) == _config(_tc(ns, what, "by-lines"))
        htb, leaf = json.loads(_tc(ns, "qdisc", "by-lines", as_json=True))
        assert (htb["kind"], htb["handle"], htb["options"]["default"]) == ("htb", "1:", "0x10")
        assert (leaf["kind"], leaf["parent"], leaf["options"]["limit"]) == \
            ("bfifo", "1:10", buffer_bytes)
