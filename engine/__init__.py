"""The NIC engine: worker processes, raw sockets and the compiled send/receive paths that drive a live fabric."""
