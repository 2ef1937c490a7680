"""Analytical model of the real fabric: pure functions, real-fabric units.

It shares no code with the protocol code (`traffic/`), the fabric (`emu/`) or the
engine (`engine/`): the inputs are plain data (graphs, paths, sizes, times,
parameters). From the vocabulary floor (`core/`) it takes the message type, the frame geometry,
the ECN marking curve and the DCQCN parameters: data and configuration
(docs/architecture.md says why that is safe).

* `maxmin`     -- max-min fair rates over routed paths (progressive filling) and
                  fluid flow completion times;
* `fluid`      -- the event-driven fluid engine shared by `maxmin` and `alphabeta`;
* `alphabeta`  -- message-DAG completion times and closed forms of collectives, with
                  the real fabric's fixed delays by default;
* `fairshare`  -- max-min fair shares over time from configured flows and starts;
* `busbw`      -- NCCL-tests algbw / busbw conventions;
* `queueing`   -- queue distributions, latency percentiles, the CC-off incast;
* `dcqcn`      -- DCQCN from the publications: parameter sets, reaction point, the
                  fluid (mean-field) equations and their fixed point;
* `incast_fluid` -- DCQCN senders into one port as a fluid from the first byte
                  (transient);
* `incast`     -- incast predictions from those, with C, r and hops from a graph;
* `ugal`       -- minimal, Valiant and UGAL throughput on a dragonfly (max-min over
                  the switches' path probabilities).
"""
