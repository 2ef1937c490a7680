"""model.fluid's event loop compiled (csrc/fluid_loop.c), float for float the Python one.

`compiled_event_loop` returns a function that runs a prepared `model.fluid._FluidRun`
through C, or None where csrc/fluid_loop.c cannot be built (the model then runs its
Python loop). Max-min rates still come from the run's own `solve` (a ctypes
callback), only for components of several jobs and the first time a class is alone
on its links: a hashed fattree,8 ring has every job alone, so C computes nearly all
of it. `experiments.modelcache` installs it (`model.fluid.use_event_loop`) before
pricing; tests/unit/test_cfluid.py compares it with the Python loop on random
fabrics and DAGs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache
from operator import attrgetter, itemgetter
from pathlib import Path

import numpy as np

from core.errors import CapabilityError
from emu.cbuild import compile_c
from model.fluid import FluidResult, _FluidRun, csr

_I64 = ctypes.POINTER(ctypes.c_int64)
_F64 = ctypes.POINTER(ctypes.c_double)
_POST = attrgetter("post_s")
_SOLVE = ctypes.CFUNCTYPE(ctypes.c_int, _I64, ctypes.c_int64)
# fluid_loop.c's answers.
_OK, _STALLED, _SOLVE_FAILED, _NO_MEMORY = range(4)


class _Fluid(ctypes.Structure):
    """fluid_loop.c's struct fluid."""

    _fields_ = [("n", ctypes.c_int64), ("n_cls", ctypes.c_int64), ("n_links", ctypes.c_int64),
                ("job_class", _I64), ("size", _F64), ("gap", _F64), ("release", _F64),
                ("pre", _F64), ("post", _F64), ("instant", ctypes.POINTER(ctypes.c_uint8)),
                ("remaining", _F64), ("rate", _F64), ("waiting", _I64),
                ("dep_ptr", _I64), ("dep_idx", _I64), ("cls_ptr", _I64), ("cls_link", _I64),
                ("cls_cap", _F64), ("solve", _SOLVE),
                ("ready", _F64), ("start", _F64), ("drained", _F64), ("finish", _F64),
                ("ready_order", _I64), ("start_order", _I64), ("drained_order", _I64),
                ("finish_order", _I64), ("n_ready", ctypes.c_int64), ("n_start", ctypes.c_int64),
                ("n_drained", ctypes.c_int64), ("n_finish", ctypes.c_int64)]


def source() -> Path:
    return Path(__file__).resolve().parent / "csrc" / "fluid_loop.c"


def _f64(a: np.ndarray) -> ctypes._Pointer:
    return a.ctypes.data_as(_F64)


def _i64(a: np.ndarray) -> ctypes._Pointer:
    return a.ctypes.data_as(_I64)


def _run(fn: Callable[[ctypes._Pointer], int], run: _FluidRun) -> FluidResult:
    jobs, dag = run.job_list, run.dag
    n = len(jobs)
    post = np.fromiter(map(_POST, jobs), dtype=float, count=n)
    instant = np.array(run.instant(), dtype=np.uint8)
    waiting = np.ascontiguousarray(run.waiting, dtype=np.int64)
    cls_ptr, cls_link = csr(run.cls_links)
    cls_cap = np.array(run.cap_list, dtype=float)
    job_class = np.ascontiguousarray(run.job_class, dtype=np.int64)
    out = np.full((4, n), np.nan)
    order = np.zeros((4, n), dtype=np.int64)
    failure: list[BaseException] = []

    def solve(component: ctypes._Pointer, count: int) -> int:
        try:
            run.solve(np.ctypeslib.as_array(component, (count,)).tolist())
            return 0
        except BaseException as e:  # noqa: BLE001 - re-raised below, not across C
            failure.append(e)
            return 1

    callback = _SOLVE(solve)
    f = _Fluid(n=n, n_cls=len(run.cls_links), n_links=len(run.link_jobs),
               job_class=_i64(job_class), size=_f64(run.size),
               gap=_f64(dag.gap_s), release=_f64(dag.release_s), pre=_f64(dag.pre_s),
               post=_f64(post),
               instant=instant.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
               remaining=_f64(run.remaining), rate=_f64(run.rate), waiting=_i64(waiting),
               dep_ptr=_i64(dag.dep_start), dep_idx=_i64(dag.dep_index), cls_ptr=_i64(cls_ptr),
               cls_link=_i64(cls_link), cls_cap=_f64(cls_cap), solve=callback,
               ready=_f64(out[0]), start=_f64(out[1]), drained=_f64(out[2]),
               finish=_f64(out[3]), ready_order=_i64(order[0]), start_order=_i64(order[1]),
               drained_order=_i64(order[2]), finish_order=_i64(order[3]))
    rc = fn(ctypes.byref(f))
    if failure:
        raise failure[0]
    if rc == _STALLED:
        raise RuntimeError("fluid simulation stalled (a job has no rate)")
    if rc == _NO_MEMORY:
        raise MemoryError("the compiled fluid loop ran out of memory")
    res = run.res
    ids = dag.ids
    counts = (f.n_ready, f.n_start, f.n_drained, f.n_finish)
    for row, (table, count) in enumerate(zip((res.ready_s, res.start_s, res.drained_s,
                                              res.finish_s), counts, strict=True)):
        at = order[row, :count]
        table.update(zip(itemgetter(*at.tolist())(ids) if count > 1 else [ids[i] for i in at],
                         out[row, at].tolist(), strict=True))
    return run.check_complete()


@cache
def compiled_event_loop() -> Callable[[_FluidRun], FluidResult] | None:
    """The compiled twin of `_FluidRun.run`, or None where fluid_loop.c does not build."""
    try:
        lib = ctypes.CDLL(str(compile_c(source(), "shared", what="the model's compiled fluid loop")))
    except (CapabilityError, OSError):
        return None
    fn = lib.fluid_run
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p]
    return lambda run: _run(fn, run)
