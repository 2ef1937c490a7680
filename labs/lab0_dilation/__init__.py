"""Lab 0, time dilation and the bandwidth-delay product: the handout is README.md, the checks checks.py."""
