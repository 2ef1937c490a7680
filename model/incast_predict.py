"""Predicted metrics of an N->1 incast (a model): the pieces of `model.queueing`
and `model.incast_fluid` put together, with C, r, buffer and hops read off a graph.

CC off: the closed form of `queueing.incast_cc_off`. DCQCN: the fluid transient of
`incast_fluid.incast_dcqcn` for completion, queue, latency, marks and CNPs, and the
fixed point of `dcqcn_fluid.dcqcn_fixed_point` as the steady state long messages settle in
(``q_star_bytes``, ``p_mark``, ...; none when the port keeps up). DCQCN is the model's
own (`model.dcqcn_fluid`), from the publications; nothing of the engine runs here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import networkx as nx

from core.frame import CNP_FRAME_BYTES, FRAME_BYTES
from model.alphabeta import DEFAULT_OVERHEAD_S
from model.dcqcn_fluid import DcqcnParams, dcqcn_fixed_point, dcqcn_params
from model.incast_fluid import IncastDcqcn, incast_dcqcn
from model.queueing import (
    base_latency_s,
    incast_backlog_growth_bps,
    incast_cc_off,
    latency_percentiles_s,
    path_hops,
    time_to_fill_s,
)

#: Realisations of the DCQCN fluid with random marks (~15 ms each).
DCQCN_REALISATIONS = 64
_QUANTILES = (0.5, 0.99, 0.999)
_LATENCY_KEYS = {0.5: "latency_p50_s", 0.99: "latency_p99_s", 0.999: "latency_p999_s"}
_BANDED = ("max_queue_bytes", "latency_p50_s", "latency_p99_s", "latency_p999_s", "completion_s")


def _band(values: Sequence[float]) -> tuple[float, float]:
    """The 5 % and 95 % points (nearest rank) of ``values``."""
    v = sorted(values)
    return v[round(0.05 * (len(v) - 1))], v[round(0.95 * (len(v) - 1))]


#: ``map``'s shape: (fn, seeds) -> fn of each seed, in order.
RealisationMap = Callable[[Callable[[int | None], Any], Sequence[int | None]], Iterable[Any]]


def _realisation(n_senders: int, size_bytes: float, r: float, port_rate_bps: float,
                 buffer_bytes: float, kmin_bytes: float, kmax_bytes: float, pmax: float,
                 params: DcqcnParams, base_rtt_s: float, alpha_s: float, packet_bytes: float,
                 reaction: str, paths_s: Sequence[tuple[float, float]],
                 bases_s: Sequence[float], seed: int | None) -> tuple[IncastDcqcn, dict[str, float]]:
    """One run of the DCQCN fluid (marks drawn from ``seed``) and its metrics."""
    f = incast_dcqcn(n_senders, size_bytes, r, port_rate_bps, buffer_bytes, kmin_bytes,
                     kmax_bytes, pmax, params, base_rtt_s=base_rtt_s, alpha_s=alpha_s,
                     packet_bytes=packet_bytes, reaction=reaction, paths_s=paths_s, seed=seed)
    row = {"completion_s": f.completion_s, "max_queue_bytes": f.queue.max_bytes,
           "mean_queue_bytes": f.queue.mean_bytes, "ecn_marks": f.marks,
           "cnps": float(f.cnps), "dropped_bytes": f.dropped_bytes,
           **{_LATENCY_KEYS[q]: v for q, v in latency_percentiles_s(
               bases_s, f.queue, port_rate_bps, _QUANTILES).items()}}
    return f, row


def predict_incast(n_senders: int, size_bytes: float, port_rate_bps: float, *,
                   buffer_bytes: float, sender_rate_bps: float | None = None,
                   cc: str = "off", kmin_bytes: float | None = None,
                   kmax_bytes: float | None = None, pmax: float | None = None,
                   dcqcn: str | DcqcnParams = "paper",
                   hop_rates_bps: Sequence[float] = (), hop_delays_s: Sequence[float] = (),
                   packet_bytes: float = FRAME_BYTES,
                   overhead_s: float = DEFAULT_OVERHEAD_S,
                   base_rtt_s: float | None = None,
                   sender_paths_s: Sequence[tuple[float, float]] = (),
                   dcqcn_reaction: str = "events",
                   realisations: int = DCQCN_REALISATIONS,
                   map_realisations: RealisationMap = map) -> dict[str, Any]:
    """Predicted metrics of an N->1 incast (model, real units).

    ``hop_rates_bps``/``hop_delays_s`` describe one sender's path (base latency);
    alpha = overhead (the NIC's per-message cost, 1 us by default) + base latency;
    ``base_rtt_s`` (the feedback loop of CNPs and NAKs without queueing) defaults to
    the base plus the same hops back for a control frame. ``sender_paths_s``, when the
    senders' paths differ: (base latency, base RTT) of each. With DCQCN a sender's first
    byte then reaches the queue its base latency less the shortest one after the first
    sender's, it reacts after its own RTT, and latency quantiles are those of the
    senders' mixture; alpha stays the first path's. CC off is the closed form of alike
    senders arriving together, on the first sender's path.

    DCQCN: switches mark at random, so the first CNP of each flow comes at a random
    time and so do the peak and the tail. The prediction is the mean over
    ``realisations`` runs of the fluid with random marks (seeds 0, 1, ...; 0: one run
    with expected marks), and ``bands`` holds the 5 % and 95 % points of the metrics in
    ``_BANDED`` over them, where one measured run may fall, and ``ranges`` their least
    and greatest values.
    ``cc`` is 'off' or 'dcqcn' (needs Kmin, Kmax, Pmax; ``dcqcn`` names a parameter
    set of `model.dcqcn_fluid`, 'paper' or 'nic', or is a `DcqcnParams`;
    ``dcqcn_reaction`` is the fluid's 'events' or 'mean-field' reaction point).
    ``map_realisations(fn, seeds)`` computes the realisations, in turn by default
    (``map``; a caller with CPUs to spare passes a parallel map:
    `core.forkmap.forked_map`; the answer is the same).
    """
    r = port_rate_bps if sender_rate_bps is None else sender_rate_bps
    if sender_paths_s and len(sender_paths_s) != n_senders:
        raise ValueError("sender_paths_s needs one (base, RTT) per sender")
    base_s = base_latency_s(hop_rates_bps, hop_delays_s, packet_bytes)
    alpha_s = overhead_s + base_s
    rtt_s = base_s + base_latency_s(hop_rates_bps, hop_delays_s, CNP_FRAME_BYTES) \
        if base_rtt_s is None else base_rtt_s
    out: dict[str, float | bool | str] = {
        "n_senders": n_senders, "size_bytes": size_bytes, "port_rate_bps": port_rate_bps,
        "sender_rate_bps": r, "base_latency_s": base_s,
        "backlog_growth_bps": incast_backlog_growth_bps(n_senders, r, port_rate_bps),
        "fill_time_s": time_to_fill_s(buffer_bytes, n_senders, r, port_rate_bps),
    }
    bases_s = [b for b, _ in sender_paths_s] or [base_s]
    if cc == "off":
        res = incast_cc_off(n_senders, size_bytes, r, port_rate_bps, buffer_bytes,
                            alpha_s=alpha_s, base_rtt_s=rtt_s, packet_bytes=packet_bytes)
        # The closed form's senders are alike and arrive together: the first one's path.
        lat = latency_percentiles_s(base_s, res.queue, port_rate_bps, _QUANTILES)
        out.update(model="incast-cc-off (uniform ramp; GBN estimate on drops)",
                   drops=res.drops, dropped_bytes=res.dropped_bytes,
                   queue_trace=res.queue_trace, completion_s=res.completion_s,
                   max_queue_bytes=res.queue.max_bytes, mean_queue_bytes=res.queue.mean_bytes,
                   **{_LATENCY_KEYS[q]: v for q, v in lat.items()})
    elif cc == "dcqcn":
        if kmin_bytes is None or kmax_bytes is None or pmax is None:
            raise ValueError("cc='dcqcn' needs kmin_bytes, kmax_bytes and pmax")
        if realisations < 0:
            raise ValueError(f"realisations must be >= 0, not {realisations!r}")
        out.update(_dcqcn_prediction(
            n_senders, size_bytes, r, port_rate_bps, buffer_bytes, kmin_bytes, kmax_bytes,
            pmax, dcqcn_params(dcqcn), base_rtt_s=rtt_s, alpha_s=alpha_s,
            packet_bytes=packet_bytes, reaction=dcqcn_reaction, realisations=realisations,
            sender_paths_s=sender_paths_s, bases_s=bases_s, map_realisations=map_realisations))
    else:
        raise ValueError(f"cc must be 'off' or 'dcqcn', not {cc!r}")
    out["goodput_bps"] = 8.0 * n_senders * size_bytes / out["completion_s"]
    return out


def _dcqcn_prediction(n_senders: int, size_bytes: float, r: float, port_rate_bps: float,
                      buffer_bytes: float, kmin_bytes: float, kmax_bytes: float, pmax: float,
                      params: DcqcnParams, *, base_rtt_s: float, alpha_s: float,
                      packet_bytes: float, reaction: str, realisations: int,
                      sender_paths_s: Sequence[tuple[float, float]],
                      bases_s: Sequence[float],
                      map_realisations: RealisationMap) -> dict[str, Any]:
    """`predict_incast`'s DCQCN metrics: the mean of the fluid's realisations, their
    bands and ranges, the median-peak trajectory, and the fixed point when the port
    is oversubscribed."""
    first_s = min(bases_s)
    realise = partial(_realisation, n_senders, size_bytes, r, port_rate_bps, buffer_bytes,
                      kmin_bytes, kmax_bytes, pmax, params, base_rtt_s, alpha_s, packet_bytes,
                      reaction, [(b - first_s, rtt) for b, rtt in sender_paths_s], bases_s)
    done = list(map_realisations(realise, list(range(realisations)) if realisations else [None]))
    fluids = [f for f, _ in done]
    rows = [row for _, row in done]
    out: dict[str, Any] = {k: sum(row[k] for row in rows) / len(rows) for k in rows[0]}
    # The trajectory shown: the realisation whose peak is the median one.
    shown = sorted(fluids, key=lambda f: f.queue.max_bytes)[len(fluids) // 2]
    out.update(model="incast-dcqcn (fluid transient; GBN recovery of drops not modelled)",
               drops=out["dropped_bytes"] > 0, queue_trace=shown.queue_trace,
               realisations=len(rows),
               bands={k: _band([row[k] for row in rows]) for k in _BANDED},
               ranges={k: (min(row[k] for row in rows), max(row[k] for row in rows))
                       for k in _BANDED})
    if n_senders * r > port_rate_bps:
        fp = dcqcn_fixed_point(n_senders, port_rate_bps, kmin_bytes, kmax_bytes, pmax,
                               params, packet_bytes, line_rate_bps=r)
        out.update(p_mark=fp.p_mark, q_star_bytes=fp.queue_bytes, alpha=fp.alpha,
                   per_flow_rate_bps=fp.rate_bps, target_rate_bps=fp.target_rate_bps,
                   marking_saturated=fp.saturated, queue_delay_s=fp.queue_delay_s)
    return out


def predict_incast_on_graph(graph: nx.Graph,
                            paths: Callable[[str, str], Sequence[Sequence[str]]]
                            | Mapping[tuple[str, str], Sequence[Sequence[str]]],
                            senders: Sequence[str], receiver: str, size_bytes: float,
                            **kwargs: Any) -> dict[str, Any]:
    """`predict_incast` with C, r, buffer and hops read from the graph.

    The bottleneck is the receiver's last hop (its link rate and ``buffer_bytes``);
    the sender rate is the first hop of the first sender; alpha's path is the first
    routed path of the first sender; every sender's first routed path there and back
    gives its base latency and RTT (``sender_paths_s``). Other keyword arguments pass
    through.
    """
    table = paths
    route = (lambda s, d: table[(s, d)]) if isinstance(table, Mapping) else table
    path = tuple(route(senders[0], receiver)[0])
    rates, delays = path_hops(graph, path)
    last = graph.edges[path[-2], path[-1]]
    kwargs.setdefault("buffer_bytes", float(last.get("buffer_bytes", math.inf)))
    kwargs.setdefault("sender_rate_bps", rates[0])
    kwargs.setdefault("hop_rates_bps", rates)
    kwargs.setdefault("hop_delays_s", delays)
    packet_bytes = kwargs.get("packet_bytes", FRAME_BYTES)

    def sender_path(s: str) -> tuple[float, float]:
        there_s = base_latency_s(*path_hops(graph, route(s, receiver)[0]), packet_bytes)
        back_s = base_latency_s(*path_hops(graph, route(receiver, s)[0]), CNP_FRAME_BYTES)
        return there_s, there_s + back_s

    kwargs.setdefault("sender_paths_s", [sender_path(s) for s in senders])
    return predict_incast(len(senders), size_bytes, float(last["rate_bps"]), **kwargs)

