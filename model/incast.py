"""Predicted metrics of an N->1 incast (a model): the pieces of `model.queueing`
and `model.incast_fluid` put together, with C, r, buffer and hops read off a graph.

CC off: the closed form of `queueing.incast_cc_off`. DCQCN: the fluid transient of
`incast_fluid.incast_dcqcn` for completion, queue, latency, marks and CNPs, and the
fixed point of `dcqcn.dcqcn_fixed_point` as the steady state long messages settle in
(``q_star_bytes``, ``p_mark``, ...; none when the port keeps up). DCQCN is the model's
own (`model.dcqcn`), from the publications; nothing of the engine runs here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import networkx as nx

from core.frame import CNP_FRAME_BYTES, FRAME_BYTES
from model.alphabeta import DEFAULT_OVERHEAD_S
from model.dcqcn import DcqcnParams, dcqcn_fixed_point, dcqcn_params
from model.incast_fluid import incast_dcqcn
from model.queueing import (
    base_latency_s,
    incast_backlog_growth_bps,
    incast_cc_off,
    latency_percentiles_s,
    path_hops,
    time_to_fill_s,
)


def predict_incast(n_senders: int, size_bytes: float, port_rate_bps: float, *,
                   buffer_bytes: float, sender_rate_bps: float | None = None,
                   cc: str = "off", kmin_bytes: float | None = None,
                   kmax_bytes: float | None = None, pmax: float | None = None,
                   dcqcn: str | DcqcnParams = "paper",
                   hop_rates_bps: Sequence[float] = (), hop_delays_s: Sequence[float] = (),
                   packet_bytes: float = FRAME_BYTES,
                   overhead_s: float = DEFAULT_OVERHEAD_S,
                   base_rtt_s: float | None = None,
                   dcqcn_reaction: str = "events") -> dict[str, float | bool | str]:
    """Predicted metrics of an N->1 incast (model, real units).

    ``hop_rates_bps``/``hop_delays_s`` describe one sender's path (base latency);
    alpha = overhead (the NIC's per-message cost, 1 us by default) + base latency; ``base_rtt_s`` (the feedback loop of CNPs and
    NAKs without queueing) defaults to the base plus the same hops back for a
    control frame.
    ``cc`` is 'off' or 'dcqcn' (needs Kmin, Kmax, Pmax; ``dcqcn`` names a parameter
    set of `model.dcqcn`, 'paper' or 'nic', or is a `DcqcnParams`;
    ``dcqcn_reaction`` is the fluid's 'events' or 'mean-field' reaction point).
    """
    r = port_rate_bps if sender_rate_bps is None else sender_rate_bps
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
    if cc == "off":
        res = incast_cc_off(n_senders, size_bytes, r, port_rate_bps, buffer_bytes,
                            alpha_s=alpha_s, base_rtt_s=rtt_s, packet_bytes=packet_bytes)
        queue, completion_s = res.queue, res.completion_s
        out.update(model="incast-cc-off (uniform ramp; GBN estimate on drops)",
                   drops=res.drops, dropped_bytes=res.dropped_bytes,
                   queue_trace=res.queue_trace)
    elif cc == "dcqcn":
        if kmin_bytes is None or kmax_bytes is None or pmax is None:
            raise ValueError("cc='dcqcn' needs kmin_bytes, kmax_bytes and pmax")
        params = dcqcn_params(dcqcn)
        fluid = incast_dcqcn(n_senders, size_bytes, r, port_rate_bps, buffer_bytes, kmin_bytes,
                             kmax_bytes, pmax, params, base_rtt_s=rtt_s, alpha_s=alpha_s,
                             packet_bytes=packet_bytes, reaction=dcqcn_reaction)
        queue, completion_s = fluid.queue, fluid.completion_s
        out.update(model="incast-dcqcn (fluid transient; GBN recovery of drops not modelled)",
                   drops=fluid.dropped_bytes > 0, dropped_bytes=fluid.dropped_bytes,
                   ecn_marks=fluid.marks, cnps=fluid.cnps, queue_trace=fluid.queue_trace)
        if n_senders * r > port_rate_bps:
            fp = dcqcn_fixed_point(n_senders, port_rate_bps, kmin_bytes, kmax_bytes, pmax,
                                   params, packet_bytes, line_rate_bps=r)
            out.update(p_mark=fp.p_mark, q_star_bytes=fp.queue_bytes, alpha=fp.alpha,
                       per_flow_rate_bps=fp.rate_bps, target_rate_bps=fp.target_rate_bps,
                       marking_saturated=fp.saturated, queue_delay_s=fp.queue_delay_s)
    else:
        raise ValueError(f"cc must be 'off' or 'dcqcn', not {cc!r}")
    lat = latency_percentiles_s(base_s, queue, port_rate_bps, (0.5, 0.99, 0.999))
    out.update(
        completion_s=completion_s,
        goodput_bps=8.0 * n_senders * size_bytes / completion_s,
        max_queue_bytes=queue.max_bytes, mean_queue_bytes=queue.mean_bytes,
        latency_p50_s=lat[0.5], latency_p99_s=lat[0.99], latency_p999_s=lat[0.999],
    )
    return out


def predict_incast_on_graph(graph: nx.Graph,
                            paths: Callable[[str, str], Sequence[Sequence[str]]]
                            | Mapping[tuple[str, str], Sequence[Sequence[str]]],
                            senders: Sequence[str], receiver: str, size_bytes: float,
                            **kwargs) -> dict[str, float | bool | str]:
    """`predict_incast` with C, r, buffer and hops read from the graph.

    The bottleneck is the receiver's last hop (its link rate and ``buffer_bytes``);
    the sender rate is the first hop of the first sender; the latency path is the
    first routed path of the first sender. Other keyword arguments pass through.
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
    return predict_incast(len(senders), size_bytes, float(last["rate_bps"]), **kwargs)

