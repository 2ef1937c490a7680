"""Capability probe: what this kernel and machine can do, and which back ends to use.

Probes act on a scratch namespace of our own (removed at once), so `emu doctor`
tells the truth about this kernel rather than guessing from config files.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field

from core.errors import CapabilityError
from emu.delay import probe_netem
from emu.ecmp_hashing import FIELDS_SYSCTL, SEED_SYSCTL, available_mechanisms
from emu.ecn.backend import choose_backend, probe_backends
from emu.lbrouter import probe_router
from emu.runs import NamespaceSet

# qdisc kind -> arguments that make a valid root qdisc of that kind
_QDISC_ARGS = {
    "htb": ["htb", "default", "10"],
    "tbf": ["tbf", "rate", "1mbit", "burst", "32kbit", "latency", "50ms"],
    "red": ["red", "limit", "400000", "min", "30000", "max", "90000", "avpkt", "1000",
            "burst", "55", "probability", "0.1", "ecn"],
    "fq_codel": ["fq_codel"],
}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    essential: bool = False


@dataclass
class Capabilities:
    checks: list[Check] = field(default_factory=list)
    marking_backend: str | None = None
    marking_detail: str = ""

    def has(self, name: str) -> bool:
        return any(c.name == name and c.ok for c in self.checks)

    @property
    def essentials_ok(self) -> bool:
        return all(c.ok for c in self.checks if c.essential)

    def as_dict(self) -> dict:
        return {
            "checks": {c.name: {"ok": c.ok, "detail": c.detail, "essential": c.essential}
                       for c in self.checks},
            "marking_backend": self.marking_backend,
            "delay_emulation": self.has("qdisc netem"),
        }


def _which(tool: str, essential: bool = False) -> Check:
    path = shutil.which(tool)
    return Check(tool, path is not None, path or "not found", essential)


def _probe_qdiscs(checks: list[Check]) -> None:
    with NamespaceSet("capability probe") as scratch:
        scratch.create("probe")
        try:
            scratch.veth("probe", "probe0", "probe", "probe1", up=False)
            veth = Check("veth", True, "veth pairs", essential=True)
        except Exception as e:  # noqa: BLE001 - any failure means no veth
            veth = Check("veth", False, str(e), essential=True)
        checks.append(veth)
        for kind, args in _QDISC_ARGS.items():
            if not veth.ok:
                checks.append(Check(f"qdisc {kind}", False, "no veth to probe on"))
                continue
            cmd = ["nsenter", f"--net={scratch.path('probe')}", "tc", "qdisc", "replace",
                   "dev", "probe0", "root", *args]
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            detail = "available" if res.returncode == 0 else (res.stderr.strip().splitlines() or
                                                             ["unavailable"])[-1]
            checks.append(Check(f"qdisc {kind}", res.returncode == 0, detail,
                                essential=(kind == "htb")))
    # netem is probed as the fabric uses it (a delay line over HTB, via pyroute2), so
    # "available" means link delay really can be emulated here.

    netem = probe_netem()
    checks.append(Check("qdisc netem", bool(netem["ok"]),
                        "link delay line (netem root over HTB) works" if netem["ok"]
                        else netem.get("why", "unavailable")))


def _multipath_policy() -> Check:
    try:
        with open("/proc/sys/net/ipv4/fib_multipath_hash_policy") as f:
            return Check("multipath L4 hash", True, f"fib_multipath_hash_policy present ({f.read().strip()} here)",
                         essential=True)
    except OSError:
        return Check("multipath L4 hash", False, "kernel lacks fib_multipath_hash_policy",
                     essential=True)


def _ecmp_hash_seed() -> Check:
    best = available_mechanisms()[0]
    if best == "seed":
        return Check("ECMP hash per switch", True,
                     f"{SEED_SYSCTL}: every switch hashes flows with its own seed")
    if best == "fields":
        return Check("ECMP hash per switch", True,
                     f"kernel {platform.release()} lacks {SEED_SYSCTL} (Linux >= 6.11); switches "
                     f"that share flows get different {FIELDS_SYSCTL} sets under hash policy 3 "
                     "instead (runs record ecmp_hash=fields)")
    return Check("ECMP hash per switch", False,
                 f"kernel {platform.release()} lacks {SEED_SYSCTL} (Linux >= 6.11) and "
                 f"{FIELDS_SYSCTL} (5.12): every switch hashes a flow alike, so its uplink at one "
                 "tier fixes the next (polarization); multi-tier ECMP results are skewed and "
                 "each run records ecmp_hash_independent=false")


def realtime_check() -> Check:
    """Whether the engine's workers may run under SCHED_FIFO (engine/worker.py), tried in a
    short-lived child so that this process keeps its own scheduling."""
    pid = os.fork()
    if pid == 0:  # the child: try, report in the exit code, leave at once
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except OSError:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        return Check("real-time workers", True, "the engine's workers run SCHED_FIFO at the "
                     "lowest priority: a fired timer takes its CPU at once")
    return Check("real-time workers", False, "not permitted (no CAP_SYS_NICE): workers run as "
                 "normal tasks and may wait behind others for their CPUs (more runs refused "
                 "for pacing lag)")


def probe(marking: str = "auto") -> Capabilities:
    """Run every check; needs root for the namespace and qdisc probes."""
    caps = Capabilities()
    is_root = os.geteuid() == 0
    caps.checks.append(Check("root", is_root, "uid 0" if is_root else "run as root (sudo)",
                             essential=True))
    caps.checks.append(Check("kernel", True, platform.release()))
    mnexec = _which("mnexec")
    caps.checks.append(Check("mnexec", mnexec.ok, mnexec.detail + " (Mininet CLI and stock mn)"))
    try:
        import mininet.net as mn_net

        caps.checks.append(Check("mininet", True, f"Mininet {mn_net.VERSION}", essential=True))
    except ImportError:
        caps.checks.append(Check("mininet", False, "python3-mininet not importable", essential=True))
    for tool in ("tc", "nsenter"):
        caps.checks.append(_which(tool, essential=True))
    for tool in ("iperf3", "clang", "tshark"):
        caps.checks.append(_which(tool))
    ovs_kernel = os.path.isdir("/sys/module/openvswitch")
    ovs_tools = shutil.which("ovs-vsctl") is not None
    caps.checks.append(Check(
        "OVS", ovs_kernel,
        ("kernel datapath" if ovs_kernel else "no kernel module" + (", userspace tools only"
                                                                   if ovs_tools else ""))
        + " (not needed: switches are L3 routers)"))
    caps.checks.append(_multipath_policy())
    caps.checks.append(_ecmp_hash_seed())
    caps.checks.append(realtime_check())
    if not is_root:
        caps.marking_detail = "needs root to probe"
        return caps
    _probe_qdiscs(caps.checks)

    def detail(b: dict) -> str:
        if b["ok"]:
            return (f"works (a one-port marker loaded and attached in {b['attach_ms']:.1f} ms; "
                    "a fabric loads one per switch)" if "attach_ms" in b else "works")
        return b.get("why", "unavailable")

    backends = probe_backends()
    caps.checks.append(Check("clsact + cls_bpf marker", backends["bpf"]["ok"],
                             detail(backends["bpf"])))
    caps.checks.append(Check("RED marking", backends["red"]["ok"], detail(backends["red"])))
    caps.checks.append(Check("eBPF router", *probe_router()))

    try:
        caps.marking_backend = choose_backend(marking, backends)
        caps.marking_detail = f"{caps.marking_backend} back end"
    except CapabilityError as e:
        caps.marking_detail = str(e)
    return caps
