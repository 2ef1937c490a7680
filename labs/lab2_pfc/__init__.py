"""Lab 2, incast, PFC and head-of-line blocking: the handout is README.md, the checks checks.py."""
