"""Which ECN back end this machine can run: probe once, then choose.

``probe_backends()`` tries the real thing in a scratch namespace (compile the
marker with clang, load it with libbpf and attach it to a veth's clsact egress;
add a RED leaf under HTB on the same veth) and reports what worked and why not.
``choose_backend(requested)`` turns that into 'bpf', 'red' or 'off', or raises
CapabilityError with the reasons.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from typing import Any

from core.ecn import Thresholds
from core.errors import CapabilityError, ParameterError
from emu.ecn.bpf import attach_bpf_marker, compile_marker
from emu.ecn.red import red_qdisc_options
from emu.runs import NamespaceSet
from emu.shaping import shape_port

BACKENDS = ("bpf", "red")
CHOICES = ("auto", "bpf", "red", "off")


def _probe_in_scratch_ns() -> dict[str, Any]:
    out: dict[str, Any] = {}
    with NamespaceSet("marking back-end probe") as scratch:
        ipr = scratch.create("probe")
        idx, _ = scratch.veth("probe", "p0", "probe", "p1")
        rate, buf, t = 10e6, 100_000, Thresholds(10_000, 40_000, 0.2)
        try:
            obj = compile_marker()
            out["clang"] = {"ok": True, "object": str(obj)}
            t0 = time.perf_counter()
            marker = attach_bpf_marker(scratch.path("probe"), "p0", rate, buf, t,
                                       rtnl=scratch.rtnls["probe"], ifindex=idx)
            out["bpf"] = {"ok": True, "attach_ms": round((time.perf_counter() - t0) * 1e3, 2)}
            marker.detach(scratch.rtnls["probe"])
        except Exception as e:  # noqa: BLE001 - any failure means "not available", with why
            out.setdefault("clang", {"ok": False, "why": str(e)})
            out["bpf"] = {"ok": False, "why": str(e).splitlines()[0] if str(e) else repr(e)}
        try:
            shape_port(ipr, idx, rate, buf, leaf="red", leaf_options=red_qdisc_options(t, rate, buf))
            out["red"] = {"ok": True}
        except Exception as e:  # noqa: BLE001
            why = str(e)
            if "No such file" in why or "(2," in why:
                why = "the kernel has no sch_red (RED qdisc)"
            out["red"] = {"ok": False, "why": why}
    return out


@functools.lru_cache(maxsize=1)
def probe_backends() -> dict[str, Any]:
    """{'bpf': {'ok': bool, 'why'|'attach_ms'}, 'red': {...}, 'clang': {...}} (cached)."""
    if os.geteuid() != 0:
        why = "needs root (namespaces, tc, BPF)"
        return {"bpf": {"ok": False, "why": why}, "red": {"ok": False, "why": why},
                "clang": {"ok": bool(shutil.which("clang"))}}
    try:
        return _probe_in_scratch_ns()
    except Exception as e:  # noqa: BLE001
        why = f"probe failed: {e}"
        return {"bpf": {"ok": False, "why": why}, "red": {"ok": False, "why": why},
                "clang": {"ok": bool(shutil.which("clang"))}}


def choose_backend(requested: str = "auto", probe: dict[str, Any] | None = None) -> str:
    """'auto' -> 'bpf' where it works, else 'red'; 'bpf'/'red' forced; 'off' -> 'off'."""
    if requested not in CHOICES:
        raise ParameterError("marking", requested, f"expected one of {', '.join(CHOICES)}")
    if requested == "off":
        return "off"
    probe = probe if probe is not None else probe_backends()
    if requested in BACKENDS:
        if probe.get(requested, {}).get("ok"):
            return requested
        raise CapabilityError(
            f"ECN back end '{requested}' is not available: {probe.get(requested, {}).get('why', 'unknown')}")
    for b in BACKENDS:
        if probe.get(b, {}).get("ok"):
            return b
    reasons = "; ".join(f"{b}: {probe.get(b, {}).get('why', 'unknown')}" for b in BACKENDS)
    raise CapabilityError(
        f"no ECN marking back end works on this machine ({reasons}); "
        "install clang and libbpf (bpf) or use a kernel with sch_red (red), or run with marking off")


def describe(probe: dict[str, Any] | None = None) -> str:
    """One line for `emu doctor`."""
    probe = probe if probe is not None else probe_backends()
    try:
        choice = choose_backend("auto", probe)
    except CapabilityError:
        choice = "none"
    parts = [f"{b}: {'yes' if probe.get(b, {}).get('ok') else 'no (' + probe.get(b, {}).get('why', '?') + ')'}"
             for b in BACKENDS]
    return f"ECN marking: {choice} ({', '.join(parts)})"

