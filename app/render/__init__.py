"""Turning a Trace into what a client asked for: JSON, a NumPy archive, a page context."""
