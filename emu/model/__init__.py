"""Analytical model of the fabric: pure functions, real-fabric units.

* `maxmin`     -- max-min fair rates over routed paths (progressive filling) and
                  fluid flow completion times;
* `fluid`      -- the event-driven fluid engine shared by `maxmin` and `alphabeta`;
* `alphabeta`  -- message-DAG completion times and closed forms of collectives;
* `busbw`      -- NCCL-tests algbw / busbw conventions;
* `queueing`   -- marking curve, queue distributions, latency percentiles, the
                  CC-off incast, the DCQCN fixed point (steady state);
* `incast_fluid` -- the DCQCN incast as a fluid from the first byte (transient);
* `incast`     -- incast predictions from those, with C, r and hops from a graph.
"""
