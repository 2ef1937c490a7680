"""Analytical model of the fabric: pure functions, real-fabric units.

* `maxmin`     -- max-min fair rates over routed paths (progressive filling) and
                  fluid flow completion times;
* `fluid`      -- the event-driven fluid engine shared by `maxmin` and `alphabeta`;
* `alphabeta`  -- message-DAG completion times and closed forms of collectives;
* `busbw`      -- NCCL-tests algbw / busbw conventions;
* `queueing`   -- incast backlog, DCQCN fixed point, latency percentiles.
"""
