"""Apply many iproute2 commands to many namespaces: one `ip -batch` per namespace.

Addresses, neighbours and routes of a k=8 fat-tree are ~13,000 netlink requests;
pyroute2 spends ~1.5 ms of Python on each, while `ip -n NS -batch -` applies a
namespace's whole list in one process at C speed. The batches run concurrently,
so a fabric configures in about a second. Its ports' plain shaping goes the same
way with ``tc`` (``emu.shaping.port_lines``); RED leaves and netem delay lines stay
on pyroute2, which computes their tables in one place (``emu.ecn.red``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

from core.errors import FabricEmuError

MAX_CONCURRENT = 16


def run_ip_batches(batches: Mapping[str, Sequence[str]], tool: str = "ip") -> None:
    """Run ``tool -n NS -batch -`` with each namespace's lines; raise on the first failure.

    ``batches`` maps a namespace *name* (under /run/netns) to its command lines.
    """
    items = [(ns, lines) for ns, lines in batches.items() if lines]
    failures: list[str] = []
    for start in range(0, len(items), MAX_CONCURRENT):
        running = []
        for ns, lines in items[start:start + MAX_CONCURRENT]:
            proc = subprocess.Popen([tool, "-n", ns, "-batch", "-"], stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            assert proc.stdin is not None
            proc.stdin.write("\n".join(lines) + "\n")
            proc.stdin.close()
            running.append((ns, proc))
        for ns, proc in running:
            assert proc.stderr is not None
            err = proc.stderr.read()
            if proc.wait() != 0:
                failures.append(f"{ns}: {err.strip()}")
    if failures:
        raise FabricEmuError(f"{tool} configuration failed in {len(failures)} namespace(s): "
                             + "; ".join(failures[:3]))
