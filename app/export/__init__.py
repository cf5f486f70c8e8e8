"""Take a page with you: its figures (matplotlib), code that reproduces its numbers, a notebook and a citation."""
