"""Experiments: thin scripts that pick topology + traffic + parameters, run, compare."""
