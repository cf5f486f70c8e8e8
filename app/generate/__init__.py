"""Greedy generation with a real model through the KV cache, and what each head looks at while it generates."""
