"""Lab 5, collectives and load balance: the handout is README.md, the checks checks.py."""
