"""Rail-optimized GPU fabric: GPU i of every server attaches to rail leaf i.

Names: GPU ``h<server>g<gpu>`` (servers from 1, GPUs/rails from 0 as device ids),
NVSwitch ``nv<server>``, rail leaf ``r<rail>``, spine ``s<n>`` (from 1). A GPU's
port eth0 is its NIC (to its rail leaf), eth1 its NVLink port.
"""

from __future__ import annotations

import math

from core.errors import ParameterError
from core.units import parse_bool
from topologies.base import (
    FABRIC_LINK_DELAY_S,
    HOST_LINK_DELAY_S,
    LEAF_SPINE_RATE_BPS,
    MAX_HOSTS,
    NIC_RATE_BPS,
    NVLINK_DELAY_S,
    NVLINK_RATE_BPS,
    FabricTopo,
    Rate,
    TopoSize,
    require_int,
    require_rate,
)


class RailOptimized(FabricTopo):
    """``servers`` servers of ``gpus`` GPUs; rail leaves all-to-all to ``spines`` spines.

    The GPUs are the hosts (info ``server``, ``gpu``). With ``nvlink`` every
    server has an NVSwitch (role 'nvswitch') linked to each of its GPUs at
    ``nvlink_rate`` (3.6 Tb/s per direction = NVLink 4's 900 GB/s bidirectional);
    routing then uses NVLink between GPUs of one server and the rails otherwise.
    ``spines`` defaults to the fewest that make the rail leaves non-blocking:
    ceil(servers * host_rate / fabric_rate).
    """

    family = "railopt"

    @staticmethod
    def _spines(servers: int, spines: object, host_rate: Rate, fabric_rate: Rate) -> int:
        if spines is not None:
            return require_int("spines", spines)
        rate_ratio = require_rate("host_rate", host_rate) / require_rate("fabric_rate",
                                                                          fabric_rate)
        try:
            need = servers * rate_ratio
        except OverflowError:  # an integer of hundreds of digits
            need = math.inf
        if not math.isfinite(need):  # servers beyond any cap: the size check says so
            raise ParameterError("servers", servers, f"too many: a fabric has at most "
                                 f"{MAX_HOSTS:,} hosts")
        return math.ceil(need)

    @classmethod
    def size(cls, servers: int = 2, gpus: int = 8, spines: int | None = None,
             nvlink: bool = True, host_rate: Rate = NIC_RATE_BPS,
             fabric_rate: Rate = LEAF_SPINE_RATE_BPS, **_rates: object) -> TopoSize:
        servers = require_int("servers", servers)
        gpus = require_int("gpus", gpus)
        nvlink = parse_bool(nvlink, "nvlink")
        spines = cls._spines(servers, spines, host_rate, fabric_rate)
        hosts = servers * gpus
        return TopoSize(hosts=hosts, switches=spines + gpus + (servers if nvlink else 0),
                        links=hosts * (2 if nvlink else 1) + gpus * spines)

    def build(self, servers: int = 2, gpus: int = 8, spines: int | None = None,
              nvlink: bool = True, host_rate: Rate = NIC_RATE_BPS,
              fabric_rate: Rate = LEAF_SPINE_RATE_BPS,
              nvlink_rate: Rate = NVLINK_RATE_BPS) -> None:
        servers = require_int("servers", servers)
        gpus = require_int("gpus", gpus)
        nvlink = parse_bool(nvlink, "nvlink")
        host_bps = require_rate("host_rate", host_rate)
        fabric_bps = require_rate("fabric_rate", fabric_rate)
        nvlink_bps = require_rate("nvlink_rate", nvlink_rate)
        spines = self._spines(servers, spines, host_bps, fabric_bps)
        self._params = {"servers": servers, "gpus": gpus, "spines": spines, "nvlink": nvlink,
                        "host_rate": host_bps, "fabric_rate": fabric_bps,
                        "nvlink_rate": nvlink_bps}
        spine_nodes = [self.add_switch(f"s{i + 1}", "spine", 2, index=i) for i in range(spines)]
        rails = [self.add_switch(f"r{rail}", "leaf", 1, rail=rail) for rail in range(gpus)]
        for server in range(1, servers + 1):
            nvswitch = (self.add_switch(f"nv{server}", "nvswitch", 1, server=server)
                        if nvlink else None)
            for gpu in range(gpus):
                host = self.add_host(f"h{server}g{gpu}", server=server, gpu=gpu, rail=gpu)
                self.add_link(host, rails[gpu], rate_bps=host_bps, delay_s=HOST_LINK_DELAY_S,
                              tier="host-leaf")
                if nvswitch:
                    self.add_link(host, nvswitch, rate_bps=nvlink_bps, delay_s=NVLINK_DELAY_S,
                                  tier="nvlink")
        for rail in rails:
            for spine in spine_nodes:
                self.add_link(rail, spine, rate_bps=fabric_bps, delay_s=FABRIC_LINK_DELAY_S,
                              tier="leaf-spine")


topos = {"railopt": RailOptimized}
