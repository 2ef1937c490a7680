"""DCQCN's knobs and the two parameter sets the project knows (configuration). Pure.

One class for every user of DCQCN parameters: the engine's reaction point
(`traffic.dcqcn`) and the model's, written independently from the publications
(`model.dcqcn_fluid`). They share these numbers, which are the configuration of the fabric
being modelled, and nothing of each other's code.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.errors import ParameterError

_INF = float("inf")


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN knobs in real-fabric units.

    ``rate_ai_bps``/``rate_hai_bps``/``min_rate_bps`` are given for
    ``line_rate_bps``; if ``scale_increase_with_line_rate`` the reaction point
    scales the two increase steps by (its line rate / ``line_rate_bps``), as the
    paper's values are proportional to a 40G link, while the NIC's are absolute.

    ``clamp_target_rate`` (Mellanox ``clamp_tgt_rate``): True = every CNP sets
    R_T <- R_C (the paper). False = R_T <- R_C only if the rate was increased
    since the previous reduction, by the byte counter, or by the timer when
    ``clamp_target_rate_after_time_inc`` (``clamp_tgt_rate_after_time_inc``);
    otherwise R_T keeps the pre-congestion rate, so back-to-back CNPs do not
    drag the target down.

    ``rate_reduce_monitor_period_s`` (``rate_reduce_monitor_period``): at most one
    reduction per period; CNPs arriving inside it are merged into one reduction
    applied at the end of the period (0 = every CNP reduces at once).

    ``rate_on_first_cnp_bps`` (``rate_to_set_on_first_cnp``): if > 0, the first
    CNP of the flow sets R_C to this rate instead of R_C (1 - alpha/2).
    """

    g: float
    alpha_initial: float
    alpha_timer_s: float  # K
    rate_increase_timer_s: float
    byte_counter_bytes: int  # B
    fast_recovery_steps: int  # F
    rate_ai_bps: float  # R_AI
    rate_hai_bps: float  # R_HAI
    min_rate_bps: float
    line_rate_bps: float
    cnp_interval_s: float
    rate_reduce_monitor_period_s: float = 0.0
    clamp_target_rate: bool = True
    clamp_target_rate_after_time_inc: bool = True
    rate_on_first_cnp_bps: float = 0.0
    scale_increase_with_line_rate: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.g <= 1.0:
            raise ParameterError("g", self.g, "must be in (0, 1]")
        if not 0.0 <= self.alpha_initial <= 1.0:
            raise ParameterError("alpha_initial", self.alpha_initial, "must be in [0, 1]")
        for name in ("alpha_timer_s", "rate_increase_timer_s", "line_rate_bps", "min_rate_bps"):
            value = getattr(self, name)
            if not 0.0 < value < _INF:
                raise ParameterError(name, value, "must be a positive finite number")
        if isinstance(self.byte_counter_bytes, bool) or not isinstance(self.byte_counter_bytes, int) \
                or self.byte_counter_bytes <= 0:
            raise ParameterError("byte_counter_bytes", self.byte_counter_bytes,
                                 "must be a positive integer")
        if isinstance(self.fast_recovery_steps, bool) or not isinstance(self.fast_recovery_steps, int) \
                or self.fast_recovery_steps < 0:
            raise ParameterError("fast_recovery_steps", self.fast_recovery_steps,
                                 "must be an integer >= 0")
        for name in ("rate_ai_bps", "rate_hai_bps", "cnp_interval_s",
                     "rate_reduce_monitor_period_s", "rate_on_first_cnp_bps"):
            value = getattr(self, name)
            if not 0.0 <= value < _INF:
                raise ParameterError(name, value, "must be a finite number >= 0")
        if self.min_rate_bps > self.line_rate_bps:
            raise ParameterError("min_rate_bps", self.min_rate_bps,
                                 f"must be <= line_rate_bps ({self.line_rate_bps!r})")

    def with_(self, **changes: object) -> DcqcnParams:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def at_line_rate(self, line_rate_bps: float) -> DcqcnParams:
        """The knobs of a sender at ``line_rate_bps``: the increase steps scaled by
        line_rate_bps / self.line_rate_bps where ``scale_increase_with_line_rate``
        (the paper's), else unchanged (the NIC's absolute steps)."""
        if not self.scale_increase_with_line_rate:
            return self
        factor = line_rate_bps / self.line_rate_bps
        return replace(self, rate_ai_bps=self.rate_ai_bps * factor,
                       rate_hai_bps=self.rate_hai_bps * factor, line_rate_bps=line_rate_bps,
                       scale_increase_with_line_rate=False)


# Zhu et al., SIGCOMM 2015: g = 1/256, K = 55 us, rate timer 55 us, B = 10 MB,
# F = 5, CNP interval 50 us, R_AI = 40 Mb/s and R_HAI = 200 Mb/s for a 40 Gb/s
# NIC. The increase steps scale with the line rate (R_AI = line/1000,
# R_HAI = line/200) so that recovery takes the same number of steps at 400G as
# in the paper at 40G; min rate is not in the paper, 1 Mb/s as on the NIC.
PAPER = DcqcnParams(
    g=1 / 256,
    alpha_initial=1.0,
    alpha_timer_s=55e-6,
    rate_increase_timer_s=55e-6,
    byte_counter_bytes=10 * 1024 * 1024,
    fast_recovery_steps=5,
    rate_ai_bps=40e6,
    rate_hai_bps=200e6,
    min_rate_bps=1e6,
    line_rate_bps=40e9,
    cnp_interval_s=50e-6,
    rate_reduce_monitor_period_s=0.0,
    clamp_target_rate=True,
    clamp_target_rate_after_time_inc=True,
    rate_on_first_cnp_bps=0.0,
    scale_increase_with_line_rate=True,
)

# ConnectX firmware defaults as reported by `mlxconfig -d <dev> query` on
# ConnectX-4/5/6 (RPG_TIME_RESET 300, RPG_BYTE_RESET 32767, RPG_THRESHOLD 1,
# RPG_AI_RATE 5, RPG_HAI_RATE 50, RPG_MIN_RATE 1, RPG_GD 11, DCE_TCP_G 1019,
# DCE_TCP_RTT 1, RATE_REDUCE_MONITOR_PERIOD 4, INITIAL_ALPHA_VALUE 1023,
# MIN_TIME_BETWEEN_CNPS 4 (2 on some firmware), CLAMP_TGT_RATE 0,
# CLAMP_TGT_RATE_AFTER_TIME_INC 1, RATE_TO_SET_ON_FIRST_CNP 0); knob names as in
# Linux drivers/infiniband/hw/mlx5/cong.c. Units: us, bytes, Mb/s.
# * alpha is a 10-bit fixed-point value (1023 ~ 1.0) and RPG_GD = 11 divides it
#   by 2^11, i.e. alpha/2 in real units: the paper's reduction.
# * dce_tcp_g = 1019 is a firmware encoding of the EWMA gain whose exact formula
#   is not public; we use the paper's g = 1/256 (the literal reading
#   (1024 - 1019)/1024 = 1/204.8 is within 25 %). Override with .with_(g=...).
# * rpg_min_dec_fac = 50 (reduce by at most 50 %) never binds with alpha <= 1.
# * Increase steps are absolute Mb/s on the NIC, so they are not scaled.
NIC = DcqcnParams(
    g=1 / 256,
    alpha_initial=1023 / 1024,
    alpha_timer_s=1e-6,
    rate_increase_timer_s=300e-6,
    byte_counter_bytes=32767,
    fast_recovery_steps=1,
    rate_ai_bps=5e6,
    rate_hai_bps=50e6,
    min_rate_bps=1e6,
    line_rate_bps=400e9,
    cnp_interval_s=4e-6,
    rate_reduce_monitor_period_s=4e-6,
    clamp_target_rate=False,
    clamp_target_rate_after_time_inc=True,
    rate_on_first_cnp_bps=0.0,
    scale_increase_with_line_rate=False,
)


#: The named sets, for the ``cc`` settings ``paper`` and ``nic``.
PARAMETER_SETS: dict[str, DcqcnParams] = {"paper": PAPER, "nic": NIC}
