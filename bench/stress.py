"""Stress: many quick experiments in a row, interrupted and killed, leave nothing behind.

Runs ``--runs`` consecutive ``emu run KIND --quick`` (the kinds alternate), one of
them stopped by Ctrl-C (SIGINT) and one by SIGKILL once its fabric is up, the
killed one followed by ``emu clean``. Before the first and after the last it counts
what a run can leave behind (network namespaces, veths, qdiscs, BPF programs,
mounts, the project's files in /run and /tmp, this process's open descriptors and
its orphaned descendants: the driver is their subreaper, so a worker whose parent
was killed is still seen) and prints both columns side by side. Exits 1 if any
count is higher at the end, 0 otherwise. A run's own failure (the fidelity gate
refusing a busy machine) is reported, not a leak.

    python -m bench.stress [--runs 50] [--kinds incast,ecmp,...] [--timeout-s 600]
                           [--lock /tmp/fabricemu-emu.lock]

Needs root. On a shared machine every fabric command takes ``--lock`` (flock); the
driver holds it for each run and each count, not in between, so others' runs
interleave but are never counted.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.table import Table

from core.errors import CapabilityError, NotRootError, ParameterError
from emu.bpfload import libbpf
from emu.netns import NETNS_DIR, wait_for_quiet_kernel
from emu.runs import NETNS_PREFIX, RUNS_DIR
from experiments.option_parsers import arg_type, clear_errors, parse_int
from experiments.registry import EXPERIMENTS

#: Names of what the project creates in /tmp (emu.cbuild, emu.netns).
TMP_PREFIXES = ("fabemu-", "fabricemu-")
#: The quick experiments that take well under a minute each; ``cc`` and ``sweep``
#: take minutes even with --quick.
DEFAULT_KINDS = ("incast", "ecmp", "collective", "fairness", "ratios", "demo")
_PR_SET_CHILD_SUBREAPER = 36
#: `emu run`'s exit status when the fidelity gate marks the run INVALID (cli.app).
INVALID_EXIT = 3


def _lines(argv: list[str]) -> list[str]:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    return [line for line in res.stdout.splitlines() if line.strip()]


def _namespaces() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def _per_namespace(argv: list[str]) -> int:
    """Lines of ``argv`` in the root namespace and in every named one."""
    count = len(_lines(argv))
    for ns in _namespaces():
        count += len(_lines(["ip", "netns", "exec", ns, *argv]))
    return count


def bpf_programs() -> int:
    """BPF programs loaded in the kernel, by walking their ids; -1 without libbpf."""
    try:
        lib = libbpf().lib
    except CapabilityError:
        return -1
    prog_id, count = ctypes.c_uint32(0), 0
    while lib.bpf_prog_get_next_id(prog_id.value, ctypes.byref(prog_id)) == 0:
        count += 1
    return count


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def census() -> dict[str, int]:
    """What a run can leave behind, counted."""
    run_files = len(os.listdir(RUNS_DIR)) if os.path.isdir(RUNS_DIR) else 0
    tmp_files = sum(len(glob.glob(f"/tmp/{p}*")) for p in TMP_PREFIXES)
    return {
        "network namespaces": len(_namespaces()),
        "fabricemu namespaces": sum(n.startswith(NETNS_PREFIX) for n in _namespaces()),
        "veths": _per_namespace(["ip", "-o", "link", "show", "type", "veth"]),
        "qdiscs": _per_namespace(["tc", "qdisc", "show"]),
        "BPF programs": bpf_programs(),
        "mounts": len(_lines(["cat", "/proc/self/mountinfo"])),
        f"files in {RUNS_DIR}": run_files,
        "files in /tmp (fabemu-*, fabricemu-*)": tmp_files,
        "open descriptors (this process)": len(os.listdir("/proc/self/fd")) - 1,
        "processes left (descendants)": len(_descendants(os.getpid())),
    }


def _fabric_up(timeout_s: float, proc: subprocess.Popen) -> bool:
    """Wait until a fabricemu namespace exists (the run's fabric is being built)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if any(n.startswith(NETNS_PREFIX) for n in _namespaces()):
            return True
        time.sleep(0.1)
    return False


def _emu(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "cli.app", *args]


@contextlib.contextmanager
def held(lock_path: str | None) -> Iterator[None]:
    """Hold the shared fabric lock (flock) for the body; nothing without a path."""
    if lock_path is None:
        yield
        return
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # safefile: ok - a lock, never written
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def run_one(i: int, kind: str, out: Path, timeout_s: float, signum: int | None,
            console: Console) -> str:
    """One ``emu run KIND --quick``; returns how it ended."""
    t0 = time.monotonic()
    proc = subprocess.Popen(_emu(["run", kind, "--quick", "--out", str(out / f"{i:02d}-{kind}")]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ended = ""
    try:
        if signum is not None:
            if _fabric_up(timeout_s, proc):
                time.sleep(1.0)  # into the run, past the build
                proc.send_signal(signum)
                ended = f"{signal.Signals(signum).name} sent; "
            else:
                ended = f"ended before its fabric was up, no {signal.Signals(signum).name}; "
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        ended += "timed out, killed; "
    last = (err or "").strip().splitlines()[-1:] or [""]
    ended += f"exit {proc.returncode} in {time.monotonic() - t0:.0f} s"
    if proc.returncode == INVALID_EXIT:
        ended += ": INVALID (the gate refused the measurement)"
    elif proc.returncode:
        ended += f": {last[0][:120]}"
    console.print(f"{i + 1:2d} {kind:<10} {ended}")
    return ended


def stress(runs: int, kinds: list[str], timeout_s: float, lock_path: str | None,
           console: Console) -> bool:
    """The whole stress run; True if nothing was left behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    interruptions = {runs // 3: signal.SIGINT, (2 * runs) // 3: signal.SIGKILL}
    with held(lock_path):
        before = census()
    out = Path(tempfile.mkdtemp(prefix="stress-runs-"))
    t0 = time.monotonic()
    try:
        for i in range(runs):
            signum = interruptions.get(i)
            with held(lock_path):
                run_one(i, kinds[i % len(kinds)], out, timeout_s, signum, console)
                if signum == signal.SIGKILL:
                    res = subprocess.run(_emu(["clean"]), capture_output=True, text=True,
                                         check=False)
                    console.print(f"   emu clean: {' '.join(res.stdout.split())[:200]}")
    finally:
        shutil.rmtree(out, ignore_errors=True)  # the runs' results, not residue
    for pid in _descendants(os.getpid()):  # reap what was orphaned to us and has ended
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    with held(lock_path):
        wait_for_quiet_kernel()  # the kernel frees namespaces asynchronously
        after = census()
    table = Table(title=f"{runs} runs ({', '.join(kinds)}) in {time.monotonic() - t0:.0f} s")
    for col in ("", "before", "after", ""):
        table.add_column(col, justify="right")
    leaks = 0
    for key, was in before.items():
        now = after[key]
        leaks += now > was
        table.add_row(key, str(was), str(now), "[red]LEFT BEHIND[/]" if now > was else "ok")
    console.print(table)
    return leaks == 0


def parse_kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in EXPERIMENTS]
    if not kinds or unknown:
        raise ParameterError("--kinds", text, f"choose from {', '.join(EXPERIMENTS)}")
    return kinds


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=arg_type(parse_int(3, 1000)), default=50,
                    help="consecutive experiments (at least 3: one is interrupted, one killed)")
    ap.add_argument("--kinds", type=arg_type(parse_kinds), default=list(DEFAULT_KINDS),
                    help="experiments to alternate, comma separated")
    ap.add_argument("--timeout-s", type=arg_type(parse_int(10, 7200)), default=600,
                    help="longest one run may take before it is killed")
    ap.add_argument("--lock", default="/tmp/fabricemu-emu.lock",
                    help="the shared fabric lock ('' for none)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise NotRootError("the stress run builds fabrics: run as root (sudo)")
    if not stress(args.runs, args.kinds, args.timeout_s, args.lock or None, Console()):
        sys.exit(1)


if __name__ == "__main__":
    main()
