"""Lab 1, ECN and DCTCP: the handout is README.md, the checks checks.py."""
