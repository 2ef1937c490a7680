"""Built-in congestion-control algorithms behind the engine's interface (``traffic.cc``).

Each is a pure class ``Name(line_rate_bps, start_s=0.0, **params)`` in real-fabric
units; ``traffic.ccload`` resolves the ``cc`` setting to one of them, to DCQCN
(``traffic.cc``) or to a user's class. See docs/congestion-control.md.
"""

from traffic.ccalgos.common import IntRecord
from traffic.ccalgos.dctcp import Dctcp
from traffic.ccalgos.hpcc import Hpcc
from traffic.ccalgos.swift import Swift
from traffic.ccalgos.timely import Timely

__all__ = ["Dctcp", "Hpcc", "IntRecord", "Swift", "Timely"]
