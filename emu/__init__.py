"""fabricemu: a time-dilated, packet-level emulator of AI-cluster networks."""

__version__ = "0.1.0"
