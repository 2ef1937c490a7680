"""What each model value claims to be: the one home of the kind and tolerance every
"model" column of a report carries.

* a **prediction** says what the real fabric measures, within ``tolerance_rel``; a
  measurement further from it than that is flagged "model disagrees" (apart from the
  fidelity gate's VALID, which only says the emulator kept up);
* an **estimate** is a rough figure from an approximation known to be coarse (go-back-N's
  goodput, the fluid's mark counts, the analysis' period): shown, no error column;
* an **upper bound** / **lower bound** is a limit the measurement should not pass;
* an **ideal** is what an ideal congestion control gives (max-min fair shares, a zero
  standing queue): the reference an algorithm is judged against, not its prediction.

Only predictions have an error column and a flag. The tolerances are the accuracy the
project states and checks for each model (README, docs/congestion-control.md, the
integration tests), never fitted to a run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


class Kind(str, Enum):
    """What a model value is (``Claim.kind``); the value is the label shown."""

    PREDICTION = "prediction"
    ESTIMATE = "estimate"
    UPPER_BOUND = "upper bound"
    LOWER_BOUND = "lower bound"
    IDEAL = "ideal"


@dataclass(frozen=True)
class Claim:
    """A model value's kind, the tolerance of a prediction, and what the model is."""

    kind: Kind
    tolerance_rel: float | None
    basis: str

    def __post_init__(self) -> None:
        if (self.kind is Kind.PREDICTION) != (self.tolerance_rel is not None):
            raise ValueError(f"{self.basis}: a prediction, and only a prediction, has a "
                             "tolerance")
        if self.tolerance_rel is not None and not 0 < self.tolerance_rel < 1:
            raise ValueError(f"{self.basis}: tolerance {self.tolerance_rel} outside (0, 1)")

    @property
    def is_prediction(self) -> bool:
        return self.kind is Kind.PREDICTION

    @property
    def label(self) -> str:
        """'prediction ±5%', 'estimate', 'upper bound', ..."""
        if self.tolerance_rel is None:
            return self.kind.value
        return f"{self.kind.value} ±{self.tolerance_rel * 100:g}%"

    def disagrees(self, measured: float | None, predicted: float | None) -> bool | None:
        """Whether a measurement is further from this prediction than its tolerance;
        None where that is undefined (not a prediction, a value missing or not finite).
        A prediction of exactly 0 (no drop, no retransmission) disagrees with any other
        value."""
        if not self.is_prediction or measured is None or predicted is None:
            return None
        if not (math.isfinite(measured) and math.isfinite(predicted)):
            return None
        if predicted == 0:
            return measured != 0
        assert self.tolerance_rel is not None
        return abs(measured - predicted) > self.tolerance_rel * abs(predicted)


def error_rel(measured: float | None, predicted: float | None) -> float | None:
    """(measured - predicted) / predicted; 0 when both are 0; None when undefined."""
    if measured is None or predicted is None or not math.isfinite(measured) \
            or not math.isfinite(predicted):
        return None
    if predicted == 0:
        return 0.0 if measured == 0 else None
    return (measured - predicted) / abs(predicted)


def prediction(tolerance_rel: float, basis: str) -> Claim:
    return Claim(Kind.PREDICTION, tolerance_rel, basis)


def estimate(basis: str) -> Claim:
    return Claim(Kind.ESTIMATE, None, basis)


# ----------------------------------------------------------------------- the claims

#: Collectives priced a priori (`alphabeta.predict_workload`, mean over ECMP hash
#: draws): ring all-reduce +0.1 % to +0.5 % over 18 demos, the rail fabric -0.5 % to
#: +2.8 % (docs/design.md); the integration tests hold time, busbw and flow rates to 5 %.
ALPHABETA = prediction(0.05, "alpha-beta message DAG, fluid max-min, real fixed delays")
#: All-reduce across two data centres over a long link (`model.wan`): the longest chain
#: of ring edges, each message alone, ACK-clocked by the transport's window; the issue's
#: 5 % for a ring across two DCs 100 km apart.
WAN_CLOSED_FORM = prediction(0.05, "two-DC closed form: longest ring-edge chain, window-limited")
#: A message DAG with compute gaps (`model.dag`, experiments.workload and .training):
#: the same fluid model, held to the issue's 10 % on an iteration's time (docs/workloads.md
#: gives the measurements); the exposed (waiting) time of a dimension is a difference of
#: two nearly equal times, an estimate; no link shared is a lower bound of the time.
DAG_TIME = prediction(0.10, "message DAG with compute gaps, fluid max-min, real fixed delays")
DAG_EXPOSED = estimate("waiting time by dimension: rank end minus its compute")
DAG_LOWER_BOUND = Claim(Kind.LOWER_BOUND, None, "message DAG's critical path, no link shared")
#: Inference (experiments.inference): percentiles of per-request TTFT and per-step time
#: per output token from the same fluid DAG model, every hash draw's samples pooled; the
#: step a request joins is quantised, so a percentile can move by a step: estimates.
INFER_LATENCY = estimate("serving DAG, fluid max-min, percentiles over hash draws pooled")
INFER_SHARE = estimate("network time (KV transfer, steps beyond compute) over the latency")
#: Bimodal traffic (experiments.bimodal): the fluid model gives a small message its fair
#: share at once, where a FIFO port makes it wait behind the bulk's queued frames.
BIMODAL_SLOWDOWN = estimate("fluid max-min FCT over hash draws / FCT alone (no FIFO wait)")
#: Link utilisation of each tier from the same model's bytes per link and time.
TIER_UTILISATION = prediction(0.05, "alpha-beta model's bytes per link over its time")
#: ECMP's per-flow rates pooled over random hash outcomes: their mean and p10 (5 %, the
#: integration test); the share near line rate and the slowest flow of one drawn
#: permutation vary with that draw.
ECMP_RATE = prediction(0.05, "fluid max-min over random ECMP hash draws, pooled")
ECMP_DRAW = estimate("one random hash outcome's statistic, expected over hash draws")
#: FCT slowdown against the same hash-draw model (p50 within 10 %, the test's bound).
ECMP_SLOWDOWN = prediction(0.10, "FCT over random ECMP hash draws / FCT alone")

#: CC-off incast without drops: the closed form of `queueing.incast_cc_off` (5 %: the
#: README's demo -2.6 % to +0.2 %, the integration test's bound).
INCAST_LOSSLESS = prediction(0.05, "CC-off incast closed form, lossless")
#: With drops: the buffer's level and the tail it sets are exact; the go-back-N goodput
#: (hence completion) and the first-pass drop count are estimates (model.queueing's
#: doc: no window, no timeout; 3.2 ms against 189 us measured in docs/congestion-control.md).
INCAST_FULL_BUFFER = prediction(0.05, "CC-off incast: a full drop-tail buffer")
INCAST_GBN = estimate("go-back-N goodput estimate of a CC-off incast with drops")
#: DCQCN's fluid transient, the mean of 64 realisations with random marks: completion
#: 5 %, queue and tail latency 10 % (the issue's target; one run spreads about ±8 %
#: around the mean by design, README); marks and CNPs of a fluid are rough counts.
DCQCN_COMPLETION = prediction(0.05, "DCQCN fluid transient, mean of random-mark runs")
DCQCN_QUEUE = prediction(0.10, "DCQCN fluid transient, mean of random-mark runs")
DCQCN_COUNT = estimate("DCQCN fluid transient's mark, CNP or drop count")
#: With drops the fluid does not resend (go-back-N is not modelled, model.incast_fluid):
#: its completion is a lower bound, its goodput an upper one.
DCQCN_LOSSY_COMPLETION = Claim(Kind.LOWER_BOUND, None,
                               "DCQCN fluid with drops: lost bytes never resent")
DCQCN_LOSSY_GOODPUT = Claim(Kind.UPPER_BOUND, None,
                            "DCQCN fluid with drops: lost bytes never resent")
#: Lossless with PFC (infinite buffer): the bottleneck busy from first to last byte;
#: the cc experiment's test holds it to 10 % (PAUSE round trips add to the drain).
PFC_LOSSLESS = prediction(0.10, "lossless incast under PFC: bottleneck busy throughout")
#: What an ideal control reaches where the model has no algorithm: the bottleneck's
#: payload rate times the share the algorithm aims at.
AIMED_THROUGHPUT = Claim(Kind.UPPER_BOUND, None, "bottleneck payload rate x target share")
#: An incast's FCT slowdown under max-min fair shares: the bottleneck's FIFO shares it
#: evenly among equal senders without CC and with DCQCN (the integration test holds
#: every bucket's p50 and p99 to 10 %); for an algorithm the model lacks, it is the ideal.
INCAST_SLOWDOWN = prediction(0.10, "fair-share FCTs of equal incast senders / FCT alone")
#: Max-min fair shares (`model.fairshare`): an ideal congestion control.
FAIR_SHARE = Claim(Kind.IDEAL, None, "max-min fair shares of an ideal congestion control")
#: Jain's index of the max-min shares, and their smallest share, which max-min makes
#: as large as it can be.
FAIR_JAIN = Claim(Kind.UPPER_BOUND, None, "Jain index of the max-min fair shares")
FAIR_SMALLEST = Claim(Kind.UPPER_BOUND, None, "smallest max-min fair share")
#: The shared bottleneck neither exceeded nor idle: aggregate within 10 % (the tests).
FAIR_AGGREGATE = prediction(0.10, "bottleneck fully used: sum of the max-min shares")

#: DCTCP's analysis (section 3.3 of the paper): amplitude and the queue's extremes
#: 20 % (the stated target), mean queue 10 % (-1.5 % to -8.9 % over 7 runs); its period
#: and alpha are consistently off by design (docs/congestion-control.md: DCTCP does not
#: grow in its window-reduced round trip, the analysis does).
DCTCP_AMPLITUDE = prediction(0.20, "DCTCP analysis, synchronised flows")
DCTCP_MEAN = prediction(0.10, "DCTCP analysis, synchronised flows")
DCTCP_TIMING = estimate("DCTCP analysis: period and alpha without the CWR round trip")
#: The port stays busy when the analysis' queue never empties.
BUSY_PORT = prediction(0.05, "port busy throughout: its payload rate")
#: HPCC's equilibrium: eta of the port's rate (long flows settle there: 10 %, the cc
#: test's bound; 90.7-91.5 Gb/s against 92.8 in docs/congestion-control.md) and no
#: standing queue, which a real queue only approaches.
HPCC_UTILISATION = prediction(0.10, "HPCC's equilibrium: eta of the port's rate")
HPCC_EQUILIBRIUM = Claim(Kind.IDEAL, None, "HPCC's design equilibrium: no standing queue")


def incast_claims(cc: str, dropped: bool) -> dict[str, Claim]:
    """The claim of each incast metric of `model.incast`'s prediction for ``cc`` ('off'
    or 'dcqcn'), with or without drops; keys are the prediction's keys."""
    if cc == "off" and not dropped:
        return dict.fromkeys(("completion_s", "goodput_bps", "latency_p50_s", "latency_p99_s",
                              "latency_p999_s", "max_queue_bytes", "marks", "drops"),
                             INCAST_LOSSLESS)
    if cc == "off":
        return {"completion_s": INCAST_GBN, "goodput_bps": INCAST_GBN, "drops": INCAST_GBN,
                "marks": INCAST_GBN, "latency_p50_s": INCAST_GBN,
                "latency_p99_s": INCAST_FULL_BUFFER, "latency_p999_s": INCAST_FULL_BUFFER,
                "max_queue_bytes": INCAST_FULL_BUFFER}
    if dropped:
        return {"completion_s": DCQCN_LOSSY_COMPLETION, "goodput_bps": DCQCN_LOSSY_GOODPUT,
                "latency_p50_s": DCQCN_QUEUE, "latency_p99_s": DCQCN_QUEUE,
                "latency_p999_s": DCQCN_QUEUE, "max_queue_bytes": DCQCN_QUEUE,
                "marks": DCQCN_COUNT, "cnps": DCQCN_COUNT, "drops": DCQCN_COUNT}
    return {"completion_s": DCQCN_COMPLETION, "goodput_bps": DCQCN_COMPLETION,
            "latency_p50_s": DCQCN_QUEUE, "latency_p99_s": DCQCN_QUEUE,
            "latency_p999_s": DCQCN_QUEUE, "max_queue_bytes": DCQCN_QUEUE,
            "marks": DCQCN_COUNT, "cnps": DCQCN_COUNT, "drops": DCQCN_QUEUE}
