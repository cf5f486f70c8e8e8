"""The kernel every page and API route stands on: the view state parsed from the URL once (state.py)."""
