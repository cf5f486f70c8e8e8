"""/train: a tiny GPT trained on the server in front of the class (engine/train.py), its loss, heads and samples
streamed live; the API under /api/v1/train."""
