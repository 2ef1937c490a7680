"""Ownership records of running fabrics, so that clean-up touches only our own.

Every fabric gets a run id; all its namespaces are named ``fabemu-<id>-<node>``
and a record ``/run/fabricemu/<id>.json`` names the owning process. ``emu clean``
removes the namespaces (and with them veths, qdiscs and BPF programs) and the
processes inside them of every run whose owner is dead, and nothing that does not
carry our prefix. /run is a tmpfs, so records never outlive a reboot, and neither
do namespaces.

Registration and clean-up take one lock (``/run/fabricemu/.lock``): a run records
itself before it creates a namespace, so clean, which reads the records and lists
the namespaces under the lock, never sees a live run's namespace without its record.

An experiment run or ``emu net`` declares itself a *session* (``declare_session``).
``claim_session`` (called first thing by ``Fabric.start``, and by every registration
as a backstop) then refuses while another live session exists,
because two runs pin their workers to the same cores and skew each other's
measurements (FABRICEMU_ALLOW_CONCURRENT=1 downgrades that to a warning). Test rigs,
probes and benchmarks are not sessions and neither count nor are refused.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import re
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

from pyroute2 import IPRoute

from core import safefile
from core.errors import FabricEmuError
from emu.netns import create_netns, delete_netns, list_netns, netns_path
from emu.rtnl import Rtnl

log = logging.getLogger(__name__)

RUNS_DIR = "/run/fabricemu"
NETNS_PREFIX = "fabemu-"
ALLOW_CONCURRENT_ENV = "FABRICEMU_ALLOW_CONCURRENT"
_RUN_RE = re.compile(r"^fabemu-([0-9a-f]{8})-")
_LOCK_NAME = ".lock"


class ConcurrentRunError(FabricEmuError):
    """Another experiment run or `emu net` is live on this machine."""


@dataclass
class _Session:
    description: str | None = None  # set: this process is an experiment run or `emu net`
    run_id: str | None = None       # its record, once claimed


_session = _Session()
#: The records this process wrote and has not removed itself: one that is gone was
#: removed under it (`emu clean --force`), and with it that run's namespaces.
_mine: set[str] = set()
#: Those of them found removed when this process went to remove them itself.
_removed: set[str] = set()


def new_run_id() -> str:
    return secrets.token_hex(4)


def netns_name(run_id: str, node: str) -> str:
    return f"{NETNS_PREFIX}{run_id}-{node}"


def _record_path(run_id: str) -> str:
    return os.path.join(RUNS_DIR, f"{run_id}.json")


@contextlib.contextmanager
def registry_lock() -> Iterator[None]:
    """Exclusive lock over the records (registration against `emu clean`)."""
    os.makedirs(RUNS_DIR, exist_ok=True)
    fd = safefile.open_lock(os.path.join(RUNS_DIR, _LOCK_NAME))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write_record(run_id: str, description: str, kind: str) -> None:
    # Atomic: a reader never sees half a record.
    safefile.write_json(_record_path(run_id),
                        {"run_id": run_id, "pid": os.getpid(), "started": time.time(),
                         "start_ticks": start_ticks(os.getpid()), "description": description,
                         "kind": kind}, indent=None)


def declare_session(description: str) -> None:
    """Mark this process as an experiment run or `emu net` (see the module notes);
    nothing is checked or written until it first registers namespaces."""
    _session.description = description


def claim_session() -> None:
    """If this process declared a session and has not claimed it yet: refuse with
    ConcurrentRunError (or warn) while another session is live, else record this one
    until the process exits. Called before anything of a run is created."""
    if _session.description is None or _session.run_id is not None:
        return
    if os.geteuid() != 0:  # cannot build a fabric at all; that error comes with the build
        return
    with registry_lock():
        _claim_session()


def _claim_session() -> None:
    """claim_session's work; the caller holds the registry lock."""
    if _session.description is None or _session.run_id is not None:
        return
    others = [r for r in list_runs()
              if r.kind == "session" and r.alive and r.pid != os.getpid()]
    if others:
        other = others[0]
        when = time.strftime("%H:%M:%S", time.localtime(other.started)) if other.started else "?"
        what = (f"another fabricemu run is live (pid {other.pid}: {other.description}, started "
                f"{when}); two runs share the CPUs and skew each other's measurements")
        if os.environ.get(ALLOW_CONCURRENT_ENV) != "1":
            raise ConcurrentRunError(f"{what}. Wait for it to end, or set "
                                     f"{ALLOW_CONCURRENT_ENV}=1 to run anyway")
        log.warning("%s (%s=1: running anyway)", what, ALLOW_CONCURRENT_ENV)
    run_id = new_run_id()
    _write_record(run_id, _session.description, "session")
    _mine.add(run_id)
    _session.run_id = run_id
    atexit.register(_end_session)


def end_session() -> None:
    """The session's command is over: drop its record and the declaration."""
    _end_session()
    _session.description = None


def _end_session() -> None:
    if _session.run_id is not None:
        unregister_run(_session.run_id)
        _session.run_id = None


def register_run(run_id: str, description: str) -> None:
    """Write the ownership record *before* creating anything, so a crash mid-build
    still leaves a record that `emu clean` can act on."""
    with registry_lock():
        _claim_session()
        _write_record(run_id, description, "fabric")
        _mine.add(run_id)


def unregister_run(run_id: str) -> None:
    try:
        os.unlink(_record_path(run_id))
    except FileNotFoundError:
        if run_id in _mine:
            _removed.add(run_id)
    _mine.discard(run_id)


def removed_underneath() -> list[str]:
    """The runs of this process whose record someone else removed, namespaces and all
    (`emu clean --force` from another shell): why this run's fabric vanished."""
    return sorted(_removed | {r for r in _mine if not os.path.exists(_record_path(r))})


def start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` (clock ticks since boot), None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # fields[0] is the state (field 3); starttime is field 22.
    return None if fields[0] in ("Z", "X") else int(fields[19])


def owner_alive(pid: int, ticks: int | None) -> bool:
    """Whether ``pid`` is the process that started at ``ticks`` (``start_ticks``) and is
    alive: comparing start times makes a recycled pid count as dead; a zombie is dead."""
    now = start_ticks(pid)
    return now is not None and (ticks is None or now == ticks)


@dataclass
class RunInfo:
    run_id: str
    pid: int | None
    alive: bool
    description: str
    namespaces: list[str]
    kind: str = "fabric"  # "session": an experiment run or `emu net` (no namespaces of its own)
    started: float | None = None


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
                alive = owner_alive(pid, rec.get("start_ticks"))
                runs[rec["run_id"]] = RunInfo(rec["run_id"], pid, alive,
                                              rec.get("description", ""), [],
                                              rec.get("kind", "fabric"), rec.get("started"))
            except (OSError, ValueError, KeyError, TypeError):
                continue
    for ns in list_netns(NETNS_PREFIX):
        m = _RUN_RE.match(ns)
        if not m:
            continue
        run = runs.setdefault(m.group(1), RunInfo(m.group(1), None, False, "(no record)", []))
        run.namespaces.append(ns)
    return list(runs.values())


def clean_runs(include_alive: bool = False) -> list[RunInfo]:
    """Remove every dead run's namespaces and record (live ones too if asked).

    Holds the registry lock throughout, so a run cannot register between the
    reading of the records and the listing of the namespaces and look dead."""
    cleaned = []
    with registry_lock():
        for run in list_runs():
            if run.alive and not include_alive:
                continue
            for ns in run.namespaces:
                delete_netns(ns)
            unregister_run(run.run_id)
            cleaned.append(run)
            if run.alive and run.pid and run.pid != os.getpid():
                # Stopped rather than left running on a fabric that is gone; it finds
                # its record removed and says so (removed_underneath).
                with contextlib.suppress(ProcessLookupError):
                    os.kill(run.pid, signal.SIGTERM)
    return cleaned


class NamespaceSet:
    """The namespaces of one run, each with the netlink sockets bound to it: a pyroute2
    IPRoute (``iprs``) and an `emu.rtnl.Rtnl` for the requests made by the hundred
    (``rtnls``).

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
        self.rtnls: dict[str, Rtnl] = {}
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
        self.rtnls[node] = Rtnl.open(self.path(node))
        return self.iprs[node]

    def veth(self, a: str, ifname_a: str, b: str, ifname_b: str, *, mtu: int | None = None,
             mac_a: str | None = None, mac_b: str | None = None, up: bool = True
             ) -> tuple[int, int]:
        """A veth pair ``ifname_a`` (in namespace ``a``) <-> ``ifname_b`` (in ``b``, which
        may be ``a``), both created by :meth:`create` first; returns the two ifindexes."""
        ipr_a, ipr_b = self.iprs[a], self.iprs[b]
        peer: dict[str, object] = {"ifname": ifname_b}
        fd = os.open(self.path(b), os.O_RDONLY) if b != a else None
        try:
            if fd is not None:
                peer["net_ns_fd"] = fd
            ipr_a.link("add", ifname=ifname_a, kind="veth", peer=peer)
        finally:
            if fd is not None:
                os.close(fd)
        indexes = []
        for ipr, ifname, mac in ((ipr_a, ifname_a, mac_a), (ipr_b, ifname_b, mac_b)):
            index = ipr.link_lookup(ifname=ifname)[0]
            attrs: dict[str, object] = {k: v for k, v in (("mtu", mtu), ("address", mac)) if v}
            if up:
                attrs["state"] = "up"
            if attrs:
                ipr.link("set", index=index, **attrs)
            indexes.append(index)
        return indexes[0], indexes[1]

    def close(self) -> None:
        for ipr in self.iprs.values():
            with contextlib.suppress(Exception):
                ipr.close()
        for rtnl in self.rtnls.values():
            rtnl.close()
        self.rtnls.clear()
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
