"""One router per module: the JSON API, the offline docs, the lab page."""
