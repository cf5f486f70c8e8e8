"""Benchmarks: speed is measured here, as ratios within one run, never in timed tests."""
