"""The walk through FlashAttention's schedule (/tiles): it steps through the key blocks, skips those above the causal
diagonal, and opens on the first step that changes something. (The schedule itself: tests/engine/test_flash.py.)"""

from __future__ import annotations


def test_the_walk_through_page_steps_through_the_blocks(client):
    from bs4 import BeautifulSoup

    page = BeautifulSoup(client.get("/tiles", params={"lang": "zh", "qb": 0, "kb": 1}).text, "html.parser")
    step = page.select_one("#tile-step")
    assert step["data-skipped"] == "true"  # queries 0-1 against keys 2-3: above the causal diagonal
    last = BeautifulSoup(client.get("/tiles", params={"lang": "en", "qb": 2, "kb": 2}).text, "html.parser")
    assert last.select_one("#tile-step")["data-kb"] == "2"  # the last key block shows the output
    out = last.select("[data-table=output] tr")
    # The page in English shows its example (#42): the API is asked for the same tokens.
    asked = {"stages": "weighted_sum", "tokens": "cat sat on the mat"}
    staged = client.get("/api/v1/attention", params=asked).json()["stages"][0]["tensors"]["heads"][0]
    assert len(out) == 1 and out[0].select_one("td").get_text().split()[0] == f"{staged[4][0]:.4f}"
    memory = last.select_one("[data-memory-staged]")
    assert int(memory["data-memory-staged"]) > 0 and int(memory["data-memory-tiled"]) > 0
    nxt = BeautifulSoup(client.get("/tiles", params={"lang": "en", "qb": 1, "kb": 0}).text, "html.parser")
    assert client.get(nxt.select_one("[data-action=next]")["href"]).status_code == 200
    assert client.get("/tiles", params={"qb": 7, "lang": "en"}).status_code == 422


def test_the_walk_through_opens_on_the_first_step_that_changes_something(client):
    from bs4 import BeautifulSoup

    def opened(**params: object) -> tuple[str, str, str]:
        r = client.get("/tiles", params={"lang": "en", **params})
        assert r.status_code == 200, r.text
        step = BeautifulSoup(r.text, "html.parser").select_one("#tile-step")
        return step["data-qb"], step["data-kb"], step["data-skipped"]

    assert opened() == ("0", "0", "false")  # the first query block against the first key block: m, l, acc are set
    assert opened(qb=2) == ("2", "0", "false")  # a query block of its own opens on its first key block too
    # Sliding window of 2: queries 4-5 read keys 3-5 only, so key block 0 (keys 0-1) is skipped and block 1 opens.
    window = {"tokens": "a b c d e f", "mask": "sliding_window", "window": 2}
    assert opened(**window, qb=2) == ("2", "1", "false")
    assert opened(**window, qb=2, kb=0) == ("2", "0", "true")  # asked for, the skipped block still shows
