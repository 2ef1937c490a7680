"""Lab 3, DCQCN: the handout is README.md, the checks checks.py."""
