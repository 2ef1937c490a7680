"""ECN marking of switch egress queues: the curve, the `bpf` and `red` back ends, selection.

```python
Thresholds(kmin_bytes, kmax_bytes, pmax)            # validated; Thresholds.for_rate(rate_bps)
mark_probability(queue_bytes, thresholds) -> float  # the curve, pure
ThresholdPolicy(default, per_tier, per_port).for_port(port) -> Thresholds
attach_bpf_marker(netns_path, ifname, rate_emu_bps, buffer_bytes, thresholds,
                  rtnl=..., ifindex=...) -> PortMarker
PortMarker.counters() / .vq_bytes() / .set_thresholds(t) / .detach(rtnl) / .close()
red_qdisc_options(thresholds, rate_emu_bps, buffer_bytes) -> dict   # shape_port leaf='red'
probe_backends() -> dict ; choose_backend('auto'|'bpf'|'red'|'off') -> str
```
"""

from core.ecn import ThresholdPolicy, Thresholds, mark_probability

__all__ = ["ThresholdPolicy", "Thresholds", "mark_probability"]
