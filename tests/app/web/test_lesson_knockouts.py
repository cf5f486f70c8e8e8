"""A lesson step's text speaks of its own knocked-out heads: when the page shows others, the panel says so (#32)."""

from __future__ import annotations

import pytest

from app.web.page import differing_knockouts
from app.web.state import PageQuery

STEP = "/predict?text=我喜欢苹果&ablate=L1+H0"


def state(path: str, **params: str) -> PageQuery:
    return PageQuery.of(params, path, ("text", "ablate"))


@pytest.mark.parametrize(
    ("path", "params", "want"),
    [
        ("/predict", {"ablate": "L1 H5"}, ("L1 H0", "L1 H5")),
        ("/predict", {}, ("L1 H0", "")),
        ("/predict", {"ablate": "L1 H0"}, None),
        ("/predict", {"ablate": "1.0"}, None),  # the older spelling, the same head
        ("/predict", {"ablate": "[[1, 0]]"}, None),  # the API's
        ("/predict", {"ablate": "L1 H0, L2 H3"}, ("L1 H0", "L1 H0, L2 H3")),
        ("/predict", {"ablate": "not a head"}, None),  # the page says its own error
        ("/lens", {"ablate": "L1 H5"}, None),  # another page than the step's
    ],
)
def test_the_step_and_the_page_heads_compared(path: str, params: dict[str, str], want: object) -> None:
    assert differing_knockouts(STEP, state(path, **params)) == want


def test_a_step_without_knockouts_and_a_page_with_one() -> None:
    assert differing_knockouts("/predict?text=我喜欢苹果", state("/predict", ablate="L1 H5")) == ("", "L1 H5")
    assert differing_knockouts("/predict?text=我喜欢苹果", state("/predict")) is None
