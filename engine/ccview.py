"""Congestion-control algorithms with a C twin: their state in C memory.

``TxRp`` holds the fields of ``traffic.dcqcn.ReactionPoint`` in the layout of
engine/csrc/dcqcn_rp.h's ``struct rp``, and borrows the Python class's own methods
for what Python still does (a CNP, the rate trace), as ``engine.tx`` does for
go-back-N: one implementation of each rule in Python, and in C what runs per burst
(the byte counter and the timers it fires) and a start the compiled loop makes.
``TxDctcp`` is a ``Dctcp`` whose attributes live in dctcp_cc.h's ``struct dctcp``,
``TxTimely`` a ``Timely`` in timely_cc.h's ``struct timely``: C acts on their ACKs
without an ECN echo, Python's methods on the echoes and CNPs.

``c_twin(cc)`` moves a QP's algorithm into C when it is a built-in one with a twin
(DCQCN, DCTCP and TIMELY exactly; a user's subclass may change any method, so it stays
Python): the algorithm to use from now on and the struct for the compiled sender;
otherwise ``cc`` itself and None.
"""

from __future__ import annotations

import ctypes
from typing import Any

from engine.tx import optional_time
from traffic.cc import Dcqcn
from traffic.ccalgos.dctcp import Dctcp
from traffic.ccalgos.timely import Timely
from traffic.ccload import CcFactory
from traffic.dcqcn import ReactionPoint

__all__ = ["RpParams", "TxDctcp", "TxRp", "TxTimely", "c_twin", "has_c_twin"]

_D, _I, _B = ctypes.c_double, ctypes.c_int64, ctypes.c_bool


class RpParams(ctypes.Structure):
    """dcqcn_rp.h's struct rp_params: the ``DcqcnParams`` fields the reaction point reads."""

    _fields_ = [("g", _D), ("alpha_timer_s", _D), ("rate_increase_timer_s", _D),
                ("byte_counter_bytes", _I), ("fast_recovery_steps", _I),
                ("rate_reduce_monitor_period_s", _D), ("rate_on_first_cnp_bps", _D),
                ("clamp_target_rate", _B), ("clamp_target_rate_after_time_inc", _B)]


class TxRp(ctypes.Structure):
    """A ``ReactionPoint`` in C memory (its methods, these fields)."""

    #: The compiled sender's field (engine.tx.TxQp) that points at it.
    QP_FIELD = "rp"

    _fields_ = [("params", RpParams), ("line_rate_bps", _D), ("rate_ai_bps", _D),
                ("rate_hai_bps", _D), ("min_rate_bps", _D), ("_rc", _D), ("_rt", _D),
                ("_alpha", _D), ("_t_stage", _I), ("_bc_stage", _I), ("_bytes", _I),
                ("_alpha_due_s", _D), ("_rate_due_s", _D), ("_next_due_s", _D), ("_decay", _D),
                ("_reduce_pending", _B), ("_reduce_due_s", _D), ("_last_reduce_s", _D),
                ("_reduced_once", _B), ("cnps_received", _I), ("rate_reductions", _I),
                ("rate_increases", _I)]

    @classmethod
    def of(cls, rp: ReactionPoint) -> TxRp:
        """A copy of ``rp``'s whole state."""
        p = rp.params
        params = RpParams(**{name: getattr(p, name) for name, _ in RpParams._fields_})
        return cls(params, *(getattr(rp, name) for name, _ in cls._fields_[1:]))


for _name in ("rate_bps", "target_rate_bps", "alpha", "timer_stage", "byte_stage",
              "next_event_s", "on_cnp", "on_bytes_sent", "advance", "drive", "_fire_timers",
              "_increase", "_reduce"):
    setattr(TxRp, _name, ReactionPoint.__dict__[_name])


class _AlgorithmView:
    """A built-in algorithm's class whose attributes are ctypes fields (the subclass
    lists them, an optional time last as its raw NaN-for-None field): ``of`` copies
    an instance's whole state, without the constructor (the instance was checked)."""

    _fields_: list[tuple[str, type]]
    #: The optional time kept in the last field, by its attribute's name.
    OPTIONAL: str

    @classmethod
    def of(cls, algo: object) -> Any:
        view = cls.__new__(cls)
        for name, _ in cls._fields_[:-1]:
            setattr(view, name, getattr(algo, name))
        setattr(view, cls.OPTIONAL, getattr(algo, cls.OPTIONAL))
        return view


class TxDctcp(_AlgorithmView, Dctcp, ctypes.Structure):
    """A ``Dctcp`` in C memory: its methods, these fields."""

    QP_FIELD = "dctcp"
    OPTIONAL = "_cut_at_s"

    _fields_ = [("from_cnps", _B), ("line_rate_bps", _D), ("g", _D), ("alpha", _D),
                ("mtu_bytes", _D), ("base_rtt_s", _D), ("min_window_bytes", _D),
                ("window_bytes", _D), ("cnps_received", _I), ("last_rtt_s", _D),
                ("_window_start_s", _D), ("_acked_bytes", _D), ("_marked_bytes", _D),
                ("_cut_at_raw", _D)]

    _cut_at_s = optional_time("_cut_at_raw")


class TxTimely(_AlgorithmView, Timely, ctypes.Structure):
    """A ``Timely`` in C memory: its methods, these fields."""

    QP_FIELD = "timely"
    OPTIONAL = "prev_rtt_s"

    _fields_ = [("line_rate_bps", _D), ("ewma_alpha", _D), ("beta", _D), ("t_low_s", _D),
                ("t_high_s", _D), ("additive_step_bps", _D), ("hai_threshold", _I),
                ("hai_factor", _I), ("fixed_min_rtt", _B), ("min_rtt_s", _D),
                ("min_rate_bps", _D), ("rate", _D), ("rtt_diff_s", _D), ("gradient", _D),
                ("negative_gradients", _I), ("cnps_received", _I), ("_prev_rtt_raw", _D)]

    prev_rtt_s = optional_time("_prev_rtt_raw")


Twin = TxRp | TxDctcp | TxTimely
#: The built-in classes whose instances become these views.
_VIEWS: dict[type, type[_AlgorithmView]] = {Dctcp: TxDctcp, Timely: TxTimely}


def c_twin(cc: object) -> tuple[object, Twin | None]:
    """``cc`` with its state moved into C (it acts on it from now on) and that
    state's struct, if it is a built-in algorithm with a C twin; else ``(cc, None)``."""
    kind = type(cc)
    if kind is Dcqcn:
        assert isinstance(cc, Dcqcn)
        if not isinstance(cc.rp, TxRp):
            cc.rp = TxRp.of(cc.rp)  # type: ignore[assignment]
        return cc, cc.rp  # type: ignore[return-value]
    view = _VIEWS.get(kind)
    if view is not None:
        twin = view.of(cc)
        return twin, twin
    if kind in _VIEWS.values():
        return cc, cc  # type: ignore[return-value]
    return cc, None


def has_c_twin(factory: CcFactory) -> bool:
    """The algorithms ``factory`` builds have a C twin (``c_twin``): built-in DCQCN,
    DCTCP and TIMELY."""
    return factory.dcqcn_params is not None or factory.constructor in _VIEWS
