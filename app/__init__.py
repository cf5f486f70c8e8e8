"""Attention Lab's web layer: the JSON API, the lab page and the command line, over `engine`."""

__version__ = "0.1.0"
