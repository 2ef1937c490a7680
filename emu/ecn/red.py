"""The `red` ECN back end: the kernel RED qdisc as the leaf of a port's HTB class.

    shape_port(ipr, ifindex, rate_emu_bps, buffer_bytes, leaf="red",
               leaf_options=red_qdisc_options(thresholds, rate_emu_bps, buffer_bytes))

RED's parameters: limit = buffer, min = Kmin, max = Kmax, max_P = Pmax, ``ecn``
(mark ECT instead of dropping), ``nodrop`` (non-ECT packets are queued, not
early-dropped, so they are treated as by the bpf marker: never marked, only
tail-dropped at the buffer) and the smallest legal burst, which gives the
largest EWMA weight (W = 1/4) and so the average that follows the instantaneous
queue most closely.

Known difference from the curve (and from the `bpf` back end): RED decides on the
*average* queue qavg <- (1-W) qavg + W q, updated per enqueued packet, so marking
lags the instantaneous queue by a few packets when it ramps and persists a little
after it drains; RED also spaces marks out (count-based), making marks between
Kmin and Kmax more regular than independent Bernoulli draws. Kmin = Kmax (step
marking) is accepted by the kernel and marks every ECT packet once qavg >= K.

pyroute2 0.9 has no RED plugin, so this module registers a small declarative one
that encodes TCA_RED_PARMS / TCA_RED_STAB / TCA_RED_MAX_P / TCA_RED_FLAGS, with
the parameter arithmetic of iproute2's `tc red` (EWMA weight, P log, idle
damping table) re-derived here. No `tc` process is forked.
"""

from __future__ import annotations

import math
import types

from pyroute2.netlink import nla
from pyroute2.netlink.rtnl.tcmsg import plugins as _tc_plugins
from pyroute2.netlink.rtnl.tcmsg.common import stats2 as _common_stats2

from core.ecn import Thresholds
from core.errors import ParameterError

TC_RED_ECN = 1
TC_RED_HARDDROP = 2
TC_RED_ADAPTATIVE = 4
TC_RED_NODROP = 8
TC_RED_SUPPORTED_FLAGS = TC_RED_ECN | TC_RED_HARDDROP | TC_RED_ADAPTATIVE | TC_RED_NODROP
#: psched clock: 1 tick = 64 ns (PSCHED_SHIFT = 6) on every kernel since 2.6.30.
PSCHED_TICKS_PER_S = 1e9 / 64
DEFAULT_AVPKT_BYTES = 1500


def red_ewma_log(qmin_bytes: int, burst_pkts: int, avpkt_bytes: int) -> int:
    """Smallest Wlog (largest weight W = 2^-Wlog) such that ``burst_pkts`` packets
    arriving at an idle queue do not lift the average above ``qmin_bytes``."""
    a = burst_pkts + 1 - qmin_bytes / avpkt_bytes
    if a < 1:
        raise ParameterError("burst", burst_pkts, f"RED needs burst >= Kmin/avpkt = {qmin_bytes / avpkt_bytes:.2f}")
    for wlog in range(2, 32):
        w = 2.0 ** -wlog
        if a <= (1 - (1 - w) ** burst_pkts) / w:
            return wlog
    raise ParameterError("burst", burst_pkts, "no EWMA weight satisfies the RED burst condition")


def smallest_burst_pkts(qmin_bytes: int, avpkt_bytes: int) -> int:
    """The smallest burst the RED parameter check accepts: ceil(Kmin / avpkt), at least 1."""
    return max(1, math.ceil(qmin_bytes / avpkt_bytes))


def red_p_log(qmin_bytes: int, qmax_bytes: int, pmax: float) -> int:
    """Plog with Pmax/(max-min) ~ 2^-Plog (the kernel uses max_P when given; kept for old kernels)."""
    p = pmax / max(1, qmax_bytes - qmin_bytes)
    plog = 0
    while plog < 31 and p * 2 <= 1:
        p *= 2
        plog += 1
    return plog


def red_idle_table(wlog: int, avpkt_bytes: int, rate_emu_bps: float) -> tuple[int, list[int]]:
    """Scell_log and the 256-entry table by which RED decays qavg over idle time."""
    xmit_ticks = PSCHED_TICKS_PER_S * avpkt_bytes / (rate_emu_bps / 8)
    lw = -math.log(1.0 - 2.0 ** -wlog) / xmit_ticks  # log-decay per tick of idle
    maxtime = 31.0 / lw
    cell_log = next((c for c in range(32) if maxtime / (1 << c) < 512), None)
    if cell_log is None:
        raise ParameterError("rate_emu_bps", rate_emu_bps, "too slow for RED's idle table")
    table = [min(31, int((i << cell_log) * lw)) for i in range(255)] + [31]
    return cell_log, table


def red_qdisc_options(thresholds: Thresholds, rate_emu_bps: float, buffer_bytes: int,
                      avpkt_bytes: int = DEFAULT_AVPKT_BYTES, nodrop: bool = True) -> dict:
    """Keyword arguments of ``ipr.tc('add', 'red', ...)`` (shape_port's ``leaf_options``)."""
    t = thresholds
    if not rate_emu_bps > 0:
        raise ParameterError("rate_emu_bps", rate_emu_bps, "must be positive")
    if t.kmin_bytes < 1:  # RED's EWMA condition needs a positive minimum
        raise ParameterError("kmin_bytes", t.kmin_bytes, "RED needs Kmin >= 1 byte")
    if t.kmin_bytes >= buffer_bytes:
        raise ParameterError("kmin_bytes", t.kmin_bytes, f"RED needs Kmin below the buffer ({buffer_bytes} bytes)")
    qmax, pmax = t.kmax_bytes, t.pmax
    if qmax >= buffer_bytes:
        # RED refuses max >= limit; a queue never exceeds the buffer anyway, so cut the
        # curve at the buffer keeping its slope (same probability at every reachable q).
        qmax = int(buffer_bytes) - 1
        pmax = t.pmax * (qmax - t.kmin_bytes) / (t.kmax_bytes - t.kmin_bytes)
    burst = smallest_burst_pkts(t.kmin_bytes, avpkt_bytes)
    wlog = red_ewma_log(t.kmin_bytes, burst, avpkt_bytes)
    # The kernel stores thresholds << Wlog in 32 bits.
    if qmax.bit_length() + wlog >= 32:
        raise ParameterError("kmax_bytes", qmax, "too large for RED's fixed-point average")
    cell_log, table = red_idle_table(wlog, avpkt_bytes, rate_emu_bps)
    return {
        "limit": int(buffer_bytes),
        "qth_min": t.kmin_bytes,
        "qth_max": qmax,
        "Wlog": wlog,
        "Plog": red_p_log(t.kmin_bytes, qmax, pmax),
        "Scell_log": cell_log,
        "idle_table": table,  # not "stab": that name is TCA_STAB of the tc message
        "max_P": min(2**32 - 1, round(pmax * 2**32)),
        "nodrop": nodrop,
        "burst_pkts": burst,  # informative; not sent
    }


# --- the pyroute2 plugin -------------------------------------------------------------

def red_flag_encoding(nodrop: bool) -> tuple[int, dict[str, int] | None]:
    """(tc_red_qopt.flags, TCA_RED_FLAGS or None): where the flags go.

    Since Linux 5.7 the kernel takes the flags from the legacy ``qopt.flags`` byte *or*
    from the TCA_RED_FLAGS bitfield, and refuses a message that sets both with EINVAL
    ("flags should be passed either through qopt, or through a dedicated attribute").
    ``nodrop`` exists only in the bitfield, so then every flag goes there (as iproute2's
    ``tc ... red ecn nodrop`` sends it), with a selector naming all of them so that
    harddrop and adaptive are cleared, not inherited. Plain ECN stays in the legacy byte,
    which every kernel understands.
    """
    if not nodrop:
        return TC_RED_ECN, None
    return 0, {"bits": TC_RED_ECN | TC_RED_NODROP, "selector": TC_RED_SUPPORTED_FLAGS}


def _get_parameters(kwarg: dict) -> dict:
    qopt_flags, flags_attr = red_flag_encoding(bool(kwarg.get("nodrop")))
    attrs = [
        ["TCA_RED_PARMS", {
            "limit": kwarg["limit"], "qth_min": kwarg["qth_min"], "qth_max": kwarg["qth_max"],
            "Wlog": kwarg["Wlog"], "Plog": kwarg["Plog"], "Scell_log": kwarg["Scell_log"],
            "flags": qopt_flags,
        }],
        ["TCA_RED_STAB", bytes(kwarg["idle_table"])],
        ["TCA_RED_MAX_P", kwarg["max_P"]],
    ]
    if flags_attr is not None:
        attrs.append(["TCA_RED_FLAGS", flags_attr])
    return {"attrs": attrs}


class _RedOptions(nla):
    nla_map = (
        ("TCA_RED_UNSPEC", "none"),
        ("TCA_RED_PARMS", "qopt"),
        ("TCA_RED_STAB", "cdata"),  # 256 x u8
        ("TCA_RED_MAX_P", "uint32"),
        ("TCA_RED_FLAGS", "red_flags"),
        ("TCA_RED_EARLY_DROP_BLOCK", "uint32"),
        ("TCA_RED_MARK_BLOCK", "uint32"),
    )

    class qopt(nla):  # struct tc_red_qopt
        fields = (("limit", "I"), ("qth_min", "I"), ("qth_max", "I"),
                  ("Wlog", "B"), ("Plog", "B"), ("Scell_log", "B"), ("flags", "B"))

    class red_flags(nla):  # struct nla_bitfield32
        fields = (("bits", "I"), ("selector", "I"))


class _RedXstats(nla):  # struct tc_red_xstats
    fields = (("early", "I"), ("pdrop", "I"), ("other", "I"), ("marked", "I"))


class _RedStats2(_common_stats2):
    class stats_app(_RedXstats):
        pass


RED_PLUGIN = types.SimpleNamespace(
    get_parameters=_get_parameters, options=_RedOptions, stats=_RedXstats, stats2=_RedStats2,
)
_tc_plugins.setdefault("red", RED_PLUGIN)
