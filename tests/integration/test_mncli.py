"""Mininet's CLI on a live fabric, driven through a pty as a user would type it."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import our_namespaces

pytestmark = pytest.mark.root

PROMPT = "\nmininet> "  # at a line start: `help` prints "  mininet> h1 ifconfig"
IPERF_RESULT = re.compile(r"\*\*\* Results: \['[\d.]+ [KMG]bits/sec', '[\d.]+ [KMG]bits/sec'\]")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class CliSession:
    """`emu net --cli` on a pty; every read has a deadline, so nothing can hang the test."""

    def __init__(self, argv: list[str], start_timeout_s: float = 120.0) -> None:
        self.master, slave = pty.openpty()
        # Concurrency is the lock's business here, not what this test checks.
        env = {**os.environ, "FABRICEMU_ALLOW_CONCURRENT": "1"}
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     start_new_session=True, close_fds=True)
        os.close(slave)
        self.buf = ""
        self.banner = self.read_until(PROMPT, start_timeout_s)

    def read_until(self, marker: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while marker not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {marker!r} within {timeout_s} s; got:\n{self.buf[-3000:]}")
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    data = os.read(self.master, 65536)
                except OSError:  # EIO: the child closed the pty
                    data = b""
                if not data:
                    raise AssertionError(f"CLI exited waiting for {marker!r}:\n{self.buf[-3000:]}")
                self.buf += ANSI.sub("", data.decode(errors="replace").replace("\r", ""))
        out, self.buf = self.buf.split(marker, 1)
        return out

    def cmd(self, line: str, timeout_s: float = 60.0) -> str:
        """Type ``line``; return what it printed (without the echoed command line)."""
        os.write(self.master, (line + "\n").encode())
        out = self.read_until(PROMPT, timeout_s) + "\n"
        out = out.split("\n", 1)[1] if out.startswith(line) else out
        return "\n".join(row.rstrip() for row in out.split("\n"))  # Mininet pads with spaces

    def exit(self, timeout_s: float = 60.0) -> int:
        os.write(self.master, b"exit\n")
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            if select.select([self.master], [], [], 0.2)[0]:
                with contextlib.suppress(OSError):  # EIO once the child closed the pty
                    os.read(self.master, 65536)
        return self.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))

    def close(self) -> None:
        if self.proc.poll() is None:  # a failed test: interrupt like Ctrl-C, then insist
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.close(self.master)


def tx_packets(cli: CliSession, node: str, ifname: str) -> int:
    """Packets ``node`` sent on ``ifname`` (/proc/net is per namespace; /sys is the host's)."""
    for row in cli.cmd(f"{node} cat /proc/net/dev").splitlines():
        name, _, counters = row.partition(":")
        if name.strip() == ifname:
            return int(counters.split()[9])
    raise AssertionError(f"{node} has no {ifname}")


def nexthops(cli: CliSession, node: str, ip: str) -> set[str]:
    """Interfaces ``node`` routes ``ip`` through."""
    return set(re.findall(r"dev (\S+)", cli.cmd(f"{node} ip route show {ip}")))


@pytest.fixture
def cli():
    session = CliSession([sys.executable, "-m", "cli.app", "net", "--topo", "leafspine,2,2,2",
                          "--test", "none", "--cli"])
    try:
        yield session
    finally:
        session.close()


def test_mininet_walkthrough_with_link_failure(cli):
    run_id = cli.cmd("py net.fab.run_id").strip()
    assert run_id and any(n.startswith(f"fabemu-{run_id}-") for n in our_namespaces())

    assert cli.cmd("nodes").split()[-8:] == ["h1", "h2", "h3", "h4", "l1", "l2", "s1", "s2"]
    net = cli.cmd("net").splitlines()
    assert "h1 h1-eth0:l1-eth1" in net
    assert "l1 l1-eth1:h1-eth0 l1-eth2:h2-eth0 l1-eth3:s1-eth1 l1-eth4:s2-eth1" in net
    links = cli.cmd("links").splitlines()
    assert len(links) == 8 and all(line.endswith("(OK OK)") for line in links)
    assert "l1-eth3<->s1-eth1 (OK OK)" in links
    assert "h1: h1-eth0" in cli.cmd("intfs")
    assert re.search(r"<FabricHost h1: lo:10\.0\.0\.1,h1-eth0:\S+ pid=\d+>", cli.cmd("dump"))
    assert cli.cmd("py h1.IP()").strip() == "10.0.0.1"
    assert all(f"<FabricHost h{i}:" in cli.cmd("py net.hosts") for i in range(1, 5))
    assert "0% dropped (12/12 received)" in cli.cmd("pingall")
    assert "1 received" in cli.cmd("h1 ping -c 1 h3")

    # A spine link fails: both ends go down, no route uses it, l2 reaches l1's
    # hosts over s2 only, and every pair still reaches every other.
    assert nexthops(cli, "l2", "10.0.0.1") == {"l2-eth3", "l2-eth4"}
    cli.cmd("link l1 s1 down")
    assert "l1-eth3<->s1-eth1 (DOWN DOWN)" in cli.cmd("links")
    assert "state DOWN" in cli.cmd("l1 ip link show l1-eth3")
    assert "state DOWN" in cli.cmd("s1 ip link show s1-eth1")
    assert "l1-eth3" not in cli.cmd("l1 ip route")
    assert "s1-eth1" not in cli.cmd("s1 ip route")
    assert nexthops(cli, "l2", "10.0.0.1") == {"l2-eth4"}
    assert nexthops(cli, "l1", "10.0.0.3") == {"l1-eth4"}
    down_sent = tx_packets(cli, "l1", "l1-eth3"), tx_packets(cli, "s1", "s1-eth1")
    other_sent = tx_packets(cli, "l1", "l1-eth4")
    assert "0% dropped (12/12 received)" in cli.cmd("pingall")
    assert IPERF_RESULT.search(cli.cmd("iperf h1 h3", timeout_s=60))
    assert (tx_packets(cli, "l1", "l1-eth3"), tx_packets(cli, "s1", "s1-eth1")) == down_sent
    # iperf runs a fixed wall time: ~650 frames at the default S = 10000 (0.8 ms each).
    assert tx_packets(cli, "l1", "l1-eth4") - other_sent > 150  # the flow took s2

    cli.cmd("link l1 s1 up")
    assert "l1-eth3<->s1-eth1 (OK OK)" in cli.cmd("links")
    assert nexthops(cli, "l2", "10.0.0.1") == {"l2-eth3", "l2-eth4"}
    assert nexthops(cli, "l1", "10.0.0.3") == {"l1-eth3", "l1-eth4"}
    assert "0% dropped (12/12 received)" in cli.cmd("pingall")

    # A host link fails: that host is cut off, the rest still reach each other.
    cli.cmd("link h1 l1 down")
    assert "50% dropped (6/12 received)" in cli.cmd("pingall")
    assert "10.0.0.1" not in cli.cmd("l2 ip route")
    cli.cmd("link h1 l1 up")
    assert "0% dropped (12/12 received)" in cli.cmd("pingall")

    assert IPERF_RESULT.search(cli.cmd("iperf h1 h2", timeout_s=60))
    # A host cut off: iperf reports the failure (within its connect timeout), no hang.
    cli.cmd("link h2 l1 down")
    assert "*** iperf3 h1 -> h2 failed" in cli.cmd("iperf h1 h2", timeout_s=30)
    cli.cmd("link h2 l1 up")
    assert cli.exit() == 0
    assert not [n for n in our_namespaces() if n.startswith(f"fabemu-{run_id}-")]


def test_sigterm_ends_the_session_and_removes_the_fabric(cli):
    # Mininet's loop swallows KeyboardInterrupt; a SIGTERM must still end the run.
    run_id = cli.cmd("py net.fab.run_id").strip()
    assert any(n.startswith(f"fabemu-{run_id}-") for n in our_namespaces())
    cli.proc.send_signal(signal.SIGTERM)
    assert cli.proc.wait(timeout=60) == 130
    assert not [n for n in our_namespaces() if n.startswith(f"fabemu-{run_id}-")]
