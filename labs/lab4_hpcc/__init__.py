"""Lab 4, delay and telemetry: HPCC: the handout is README.md, the checks checks.py."""
