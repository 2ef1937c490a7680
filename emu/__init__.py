"""The emulator runtime (kernel I/O): namespaces, the fabric, shaping, delay, ECN marking, PFC, telemetry."""

__version__ = "0.1.0"
