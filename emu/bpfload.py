"""A small libbpf loader through ctypes: load BPF objects, attach them to tc, read their maps.

* libbpf (``libbpf.so.1``) is loaded by absolute path from the linker cache
  (:func:`emu.cbuild.system_library`), never through a search path; its log is
  captured for error messages.
* :func:`load_object` opens and loads an object and returns dup'ed fds of one
  program and its maps, then closes the object: whoever attaches the program holds it.
* :func:`attach_clsact` / :func:`detach_clsact`: a direct-action cls_bpf filter on a
  port's clsact hook, through the namespace's `emu.rtnl.Rtnl` (no fork of ``tc``);
  :func:`attach_counted` builds, loads and attaches a program with one array map of u64,
  read and set by :func:`read_u64` / :func:`write_u64` (loss filters, port counters).
* :func:`run_time_stats` turns on the kernel's timing of every BPF program while it is
  open, and :func:`programs_run_time` reads what our programs (by id) have used.
* Nothing is pinned by default; :func:`remove_pins` exists for runs that pin on purpose.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import CapabilityError
from emu.cbuild import compile_c, system_library
from emu.rtnl import Rtnl

#: Explicit tc priorities (the kernel refuses to delete a filter by handle without one).
#: A hook runs its filters by rising priority: a link's loss filter comes before the port's
#: own program (router, sink), because the frames it drops never reach the switch.
LINK_FILTER_PRIO = 1
FILTER_PRIO = 2
PIN_ROOT = "/sys/fs/bpf/fabricemu"
#: bpf_map_lookup_elem_flags: read a value under its bpf_spin_lock.
BPF_F_LOCK = 4

_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
#: A NULL print hook: libbpf logs nothing.
_SILENT = _PRINT_FN()


def _load_libbpf() -> ctypes.CDLL:
    """libbpf.so.1 by absolute path from the linker cache (root-owned, see
    :func:`emu.cbuild.system_library`), never through a search path."""
    errors = []
    for path in system_library("libbpf.so.1"):
        try:
            return ctypes.CDLL(str(path), use_errno=True)
        except OSError as e:  # e.g. another architecture's copy
            errors.append(str(e))
    why = "; ".join(errors) or "not in the dynamic linker's cache"
    raise CapabilityError(f"the bpf ECN marker needs libbpf.so.1 (apt install libbpf1): {why}")


class _Libbpf:
    """The handful of libbpf calls we use, with libbpf's log captured for error messages."""

    def __init__(self) -> None:
        self.lib = lib = _load_libbpf()
        vp, cp, i, u32 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32
        for name, res, args in (
            ("bpf_object__open_file", vp, [cp, vp]),
            ("bpf_object__load", i, [vp]),
            ("bpf_object__close", None, [vp]),
            ("bpf_object__find_program_by_name", vp, [vp, cp]),
            ("bpf_object__find_map_by_name", vp, [vp, cp]),
            ("bpf_program__fd", i, [vp]),
            ("bpf_map__fd", i, [vp]),
            ("bpf_map__set_max_entries", i, [vp, u32]),
            ("bpf_map__reuse_fd", i, [vp, i]),
            ("bpf_map_update_elem", i, [i, vp, vp, ctypes.c_uint64]),
            ("bpf_map_lookup_elem", i, [i, vp, vp]),
            ("bpf_map_delete_elem", i, [i, vp]),
            ("bpf_map_lookup_elem_flags", i, [i, vp, vp, ctypes.c_uint64]),
            ("bpf_obj_get_info_by_fd", i, [i, vp, ctypes.POINTER(u32)]),
            ("bpf_prog_get_fd_by_id", i, [u32]),
            ("bpf_enable_stats", i, [i]),
            ("libbpf_num_possible_cpus", i, []),
            ("libbpf_set_print", vp, [_PRINT_FN]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        libc = ctypes.CDLL(None)
        self._vsnprintf = libc.vsnprintf
        self._vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
        self.log: list[str] = []
        self.printer = _PRINT_FN(self._print)  # keep a reference: libbpf stores the pointer
        lib.libbpf_set_print(self.printer)
        self.ncpus = lib.libbpf_num_possible_cpus()
        self.lock = threading.Lock()

    def _print(self, level: int, fmt: bytes, args: int) -> int:
        if level >= 2:  # LIBBPF_DEBUG: dozens of lines per load, never needed for errors
            return 0
        buf = ctypes.create_string_buffer(2048)
        # va_list is an array type on x86_64/aarch64, so it arrives here as a pointer.
        self._vsnprintf(buf, len(buf), fmt, args)
        self.log.append(buf.value.decode(errors="replace"))
        del self.log[:-200]
        return 0


_libbpf: _Libbpf | None = None


def libbpf() -> _Libbpf:
    global _libbpf
    if _libbpf is None:
        _libbpf = _Libbpf()
    return _libbpf


#: struct bpf_prog_info (UAPI, stable): its first 256 bytes, and where its fields sit.
_INFO_BYTES = 256
_INFO_ID, _INFO_RUN_TIME_NS, _INFO_RUN_CNT = 4, 192, 200


def _prog_info(fd: int) -> bytes | None:
    """The start of ``fd``'s struct bpf_prog_info, or None if it cannot be read. The
    buffer is new each time: the kernel takes the lengths it filled in as buffers to
    fill (EFAULT for a NULL one)."""
    info = ctypes.create_string_buffer(_INFO_BYTES)
    size = ctypes.c_uint32(_INFO_BYTES)
    if libbpf().lib.bpf_obj_get_info_by_fd(fd, info, ctypes.byref(size)) != 0:
        return None
    return info.raw


def program_id(fd: int) -> int:
    """The kernel's id of the program (or map: their infos start alike) behind ``fd``
    (0 if it cannot be read)."""
    info = _prog_info(fd)
    return 0 if info is None else struct.unpack_from("I", info, _INFO_ID)[0]

_BPF_STATS_RUN_TIME = 0


@contextlib.contextmanager
def run_time_stats() -> Iterator[bool]:
    """The kernel's run-time accounting of BPF programs (BPF_ENABLE_STATS) while the
    block runs; it costs two clock reads per program run and ends when its fd closes
    (a count: other holders keep theirs). Yields False where the kernel refuses."""
    fd = libbpf().lib.bpf_enable_stats(_BPF_STATS_RUN_TIME)
    try:
        yield fd >= 0
    finally:
        if fd >= 0:
            os.close(fd)


@dataclass(frozen=True)
class RunTime:
    """What BPF programs have run: invocations and kernel-timed ns, summed."""

    runs: int = 0
    run_ns: int = 0

    def __sub__(self, other: RunTime) -> RunTime:
        return RunTime(self.runs - other.runs, self.run_ns - other.run_ns)


def programs_run_time(prog_ids: Iterable[int]) -> RunTime:
    """The run counts and times of the programs with these ids (0 for one that is gone);
    they grow only inside `run_time_stats`."""
    lib = libbpf().lib
    runs = run_ns = 0
    for prog_id in prog_ids:
        fd = lib.bpf_prog_get_fd_by_id(prog_id)
        if fd < 0:
            continue
        try:
            info = _prog_info(fd)
        finally:
            os.close(fd)
        if info is not None:
            run_ns += struct.unpack_from("Q", info, _INFO_RUN_TIME_NS)[0]
            runs += struct.unpack_from("Q", info, _INFO_RUN_CNT)[0]
    return RunTime(runs, run_ns)


def program_alive(prog_id: int) -> bool:
    """Whether a BPF program with this id still exists (clean-up checks)."""
    fd = libbpf().lib.bpf_prog_get_fd_by_id(prog_id)
    if fd < 0:
        return False
    os.close(fd)
    return True


def load_object(obj_path: Path, program: str, maps: tuple[str, ...] = (), *, what: str,
                max_entries: Mapping[str, int] | None = None,
                reuse_maps: Mapping[str, int] | None = None
                ) -> list[int]:
    """Open and load a BPF object; return dup'ed fds of ``program`` and ``maps``.

    The object itself is closed again: whoever attaches the program holds it.
    ``max_entries`` sizes maps (by name) before loading: one entry for an optional
    feature left off, a switch's port count for per-port state;
    ``reuse_maps`` gives maps (by name) an existing map to use instead of a new one
    (its fd; libbpf takes its type, sizes and entries, another object's map shared).
    """
    lb = libbpf()
    with lb.lock:  # libbpf's log buffer and print hook are shared
        # libbpf logs dozens of debug lines per load through the Python hook, each one
        # taking the GIL from whichever thread holds it (the fabric's builder, while its
        # markers load ahead in a thread): a load runs silent, and only one the kernel
        # refuses runs again with its log captured, for the error message.
        lb.lib.libbpf_set_print(_SILENT)
        try:
            loaded = _load_once(lb, obj_path, program, maps, max_entries or {}, reuse_maps or {})
        finally:
            lb.lib.libbpf_set_print(lb.printer)
        if isinstance(loaded, list):
            return loaded
        lb.log.clear()
        loaded = _load_once(lb, obj_path, program, maps, max_entries or {}, reuse_maps or {})
        if isinstance(loaded, list):
            return loaded
        tail = "\n".join(lb.log[-15:])
        raise CapabilityError(f"the kernel refused {what} ({os.strerror(-loaded)}):\n{tail}")


def _load_once(lb: _Libbpf, obj_path: Path, program: str, maps: tuple[str, ...],
               max_entries: Mapping[str, int], reuse_maps: Mapping[str, int]
               ) -> list[int] | int:
    """`load_object`'s open and load: the dup'ed fds, or libbpf's negative error."""
    obj = lb.lib.bpf_object__open_file(str(obj_path).encode(), None)
    if not obj:
        err = ctypes.get_errno()
        raise CapabilityError(f"libbpf cannot open {obj_path}: {os.strerror(err)}")
    try:
        for name, entries in max_entries.items():
            lb.lib.bpf_map__set_max_entries(
                lb.lib.bpf_object__find_map_by_name(obj, name.encode()), entries)
        for name, fd in reuse_maps.items():
            ret = lb.lib.bpf_map__reuse_fd(lb.lib.bpf_object__find_map_by_name(obj, name.encode()),
                                           fd)
            if ret != 0:
                return int(ret)
        ret = lb.lib.bpf_object__load(obj)
        if ret != 0:
            return int(ret)
        fds = [lb.lib.bpf_program__fd(lb.lib.bpf_object__find_program_by_name(
            obj, program.encode()))] + [
            lb.lib.bpf_map__fd(lb.lib.bpf_object__find_map_by_name(obj, n.encode()))
            for n in maps]
        return [os.dup(fd) for fd in fds]
    finally:
        lb.lib.bpf_object__close(obj)


def attach_clsact(rtnl: Rtnl, ifindex: int, prog_fd: int, name: str, *, ingress: bool,
                  prio: int = FILTER_PRIO) -> None:
    """Attach a direct-action cls_bpf filter on the port's clsact hook (adding clsact). A
    filter that lets a frame go on to the next one returns TC_ACT_UNSPEC, not TC_ACT_OK."""
    rtnl.add_clsact(ifindex)
    rtnl.add_bpf_filter(ifindex, prog_fd, name, ingress=ingress, prio=prio)


def detach_clsact(rtnl: Rtnl, ifindex: int, *, ingress: bool, prio: int = FILTER_PRIO) -> None:
    """Delete the filter :func:`attach_clsact` added (clsact itself stays)."""
    rtnl.del_bpf_filter(ifindex, ingress=ingress, prio=prio)


def attach_counted(rtnl: Rtnl, ifindex: int, source: Path, program: str, map_name: str,
                   name: str, *, ingress: bool, what: str, prio: int = FILTER_PRIO) -> int:
    """Compile ``source``, load ``program`` with its one array map ``map_name`` and attach
    it on the port's clsact hook; return the map's fd (the filter holds the program)."""
    prog_fd, map_fd = load_object(compile_c(source, "bpf", what=what), program, (map_name,),
                                  what=what)
    try:
        attach_clsact(rtnl, ifindex, prog_fd, name, ingress=ingress, prio=prio)
    except BaseException:
        os.close(map_fd)
        raise
    finally:
        os.close(prog_fd)
    return map_fd


def read_u64(fd: int, key: int, what: str) -> int:
    """Entry ``key`` of a BPF array map of u64 values."""
    k, v = ctypes.c_uint32(key), ctypes.c_uint64(0)
    if libbpf().lib.bpf_map_lookup_elem(fd, ctypes.byref(k), ctypes.byref(v)) != 0:
        raise OSError(ctypes.get_errno(), f"bpf_map_lookup_elem({what})")
    return int(v.value)


def update_elem(fd: int, key: Any, value: Any, what: str) -> None:
    """Set entry ``key`` (a ctypes value) of a BPF map to ``value`` (one); ``what``
    names the map in the error."""
    if libbpf().lib.bpf_map_update_elem(fd, ctypes.byref(key), ctypes.byref(value), 0) != 0:
        raise OSError(ctypes.get_errno(), f"bpf_map_update_elem({what})")


def write_u64(fd: int, key: int, value: int, what: str) -> None:
    """Set entry ``key`` of a BPF array map of u64 values."""
    update_elem(fd, ctypes.c_uint32(key), ctypes.c_uint64(value), what)


def remove_pins(run_id: str) -> bool:
    """Remove /sys/fs/bpf/fabricemu/<run_id> (nothing is pinned by default)."""
    path = Path(PIN_ROOT) / run_id
    if not path.exists():
        return False
    for p in sorted(path.rglob("*"), reverse=True):
        with contextlib.suppress(OSError):
            p.rmdir() if p.is_dir() else p.unlink()
    with contextlib.suppress(OSError):
        path.rmdir()
    return True
