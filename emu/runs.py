"""Ownership records of running fabrics, so that clean-up touches only our own.

Every fabric gets a run id; all its namespaces are named ``fabemu-<id>-<node>``
and a record ``/run/fabricemu/<id>.json`` names the owning process. ``emu clean``
removes the namespaces (and with them veths, qdiscs and BPF programs) and the
processes inside them of every run whose owner is dead, and nothing that does not
carry our prefix. /run is a tmpfs, so records never outlive a reboot, and neither
do namespaces.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from dataclasses import dataclass

from pyroute2 import IPRoute

from emu.errors import FabricEmuError
from emu.netns import create_netns, delete_netns, list_netns, netns_path

RUNS_DIR = "/run/fabricemu"
NETNS_PREFIX = "fabemu-"
_RUN_RE = re.compile(r"^fabemu-([0-9a-f]{8})-")


def new_run_id() -> str:
    return secrets.token_hex(4)


def netns_name(run_id: str, node: str) -> str:
    return f"{NETNS_PREFIX}{run_id}-{node}"


def _record_path(run_id: str) -> str:
    return os.path.join(RUNS_DIR, f"{run_id}.json")


def register_run(run_id: str, description: str) -> None:
    """Write the ownership record *before* creating anything, so a crash mid-build
    still leaves a record that `emu clean` can act on."""
    os.makedirs(RUNS_DIR, exist_ok=True)
    with open(_record_path(run_id), "w") as f:
        json.dump({"run_id": run_id, "pid": os.getpid(), "started": time.time(),
                   "start_ticks": _start_ticks(os.getpid()), "description": description}, f)


def unregister_run(run_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_record_path(run_id))


def _start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` (clock ticks since boot), None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # fields[0] is the state (field 3); starttime is field 22.
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _owner_alive(pid: int, start_ticks: int | None) -> bool:
    # Comparing start times makes a recycled pid count as dead; a zombie is dead too.
    now = _start_ticks(pid)
    return now is not None and (start_ticks is None or now == start_ticks)


@dataclass
class RunInfo:
    run_id: str
    pid: int | None
    alive: bool
    description: str
    namespaces: list[str]


def list_runs() -> list[RunInfo]:
    """Every run with a record or with namespaces carrying our prefix."""
    runs: dict[str, RunInfo] = {}
    if os.path.isdir(RUNS_DIR):
        for entry in sorted(os.listdir(RUNS_DIR)):
            if not entry.endswith(".json"):
                continue
            try:
                with open(os.path.join(RUNS_DIR, entry)) as f:
                    rec = json.load(f)
                pid = int(rec["pid"])
                alive = _owner_alive(pid, rec.get("start_ticks"))
                runs[rec["run_id"]] = RunInfo(rec["run_id"], pid, alive,
                                              rec.get("description", ""), [])
            except (OSError, ValueError, KeyError):
                continue
    for ns in list_netns(NETNS_PREFIX):
        m = _RUN_RE.match(ns)
        if not m:
            continue
        run = runs.setdefault(m.group(1), RunInfo(m.group(1), None, False, "(no record)", []))
        run.namespaces.append(ns)
    return list(runs.values())


def clean_runs(include_alive: bool = False) -> list[RunInfo]:
    """Remove every dead run's namespaces and record (live ones too if asked)."""
    cleaned = []
    for run in list_runs():
        if run.alive and not include_alive:
            continue
        for ns in run.namespaces:
            delete_netns(ns)
        unregister_run(run.run_id)
        cleaned.append(run)
    return cleaned


class NamespaceSet:
    """The namespaces of one run, each with the netlink socket bound to it.

    Every creator of namespaces (fabrics, capability probes, test rigs, benchmarks)
    goes through this, so each is registered before it exists and named
    ``fabemu-<run>-<node>``: `emu clean` can then reclaim it after a crash, and
    nothing else is ever touched. ``close()`` closes the sockets (an open one keeps a
    namespace alive), removes the namespaces and the record; it is safe to call twice.
    """

    def __init__(self, description: str) -> None:
        self.run_id = new_run_id()
        self.description = description
        self.iprs: dict[str, IPRoute] = {}
        self._registered = False

    def name(self, node: str) -> str:
        return netns_name(self.run_id, node)

    def path(self, node: str) -> str:
        return netns_path(self.name(node))

    def create(self, node: str, sysctls: dict[str, str | int] | None = None) -> IPRoute:
        if not self._registered:
            register_run(self.run_id, self.description)
            self._registered = True
        try:
            self.iprs[node] = create_netns(self.name(node), sysctls)
        except FileExistsError as e:  # never adopt a namespace we did not create
            raise FabricEmuError(f"namespace {e.filename} exists already") from e
        return self.iprs[node]

    def close(self) -> None:
        for ipr in self.iprs.values():
            with contextlib.suppress(Exception):
                ipr.close()
        for node in self.iprs:
            delete_netns(self.name(node))
        if self._registered:
            unregister_run(self.run_id)
            self._registered = False
        self.iprs.clear()

    def __enter__(self) -> NamespaceSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
