"""Traffic: RoCEv2 packets, the NIC model (DCQCN, go-back-N), collectives, engine."""
