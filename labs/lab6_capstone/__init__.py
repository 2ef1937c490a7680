"""Lab 6, the capstone (the model against the measurement): the handout is README.md, the checks checks.py."""
