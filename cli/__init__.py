"""The `emu` command line: the top floor, over experiments, the engine and the fabric."""
