"""/train in a real browser (#42): the class flow of the lesson "Train your own GPT" — its step 1, the form with its
defaults and the mask-off twin ticked, Train — with the step count and the loss seen changing on the page while each
run trains (the page redraws its live block as the run's events come: that redraw answered 500, and the page stayed
at "0 / 1000 steps" and "—" while both runs finished), then both runs finished; and the page read from the back of
the room: presenter mode at 1920×1080 draws the numbers a lesson asks about at 24 px or more and every chart's tick
numbers at 18 px or more, each chart with both axes titled and numbered.

Every wait polls the page for a state (Playwright's wait_for_function / expect); none sleeps for a time."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from app.web.lessons import BY_SLUG, step_url
from tests.wait import wait_until

pytestmark = pytest.mark.browser
SLOW = 180_000  # ms: two runs on two busy cores; every wait polls for a state and ends as soon as it is reached
STEPS = 300  # instead of the lesson's 1000: the loss still falls visibly, the class flow takes seconds

# The run's panel as the page shows it now: its status, the step count and the training loss (as text).
SHOWN = """id => {
  const run = document.getElementById("run-" + id);
  if (!run) return null;
  const step = /(\\d+)\\s*\\/\\s*(\\d+)/.exec(run.querySelector(".train-status").textContent);
  return {status: run.dataset.status, step: step ? Number(step[1]) : -1,
          loss: run.querySelector("dd[data-n=train_loss]").textContent.trim()};
}"""


def seen_training(page: Page, run_ids: list[str]) -> None:
    """Wait until the page has shown each run training, with a step count and a loss number (not "—") other than
    the ones it showed first, the page never reloaded. Each run's state is read from the page as it is redrawn and
    kept once seen, whichever run trains first (the slot is not promised to the first one asked for); every run's
    steps take 0.02 s at least (tests/browser/conftest.py), so a run lasts several redraws however fast the machine."""
    first = {run_id: page.evaluate(SHOWN, run_id) for run_id in run_ids}
    assert all(first.values()), f"no panel for a run: {first}"
    page.evaluate("window.seenTraining = {}")
    for seen in range(1, len(run_ids) + 1):  # each run its own bound (SLOW), as the runs train one after the other
        page.wait_for_function(
            """([ids, first, seen]) => {
          const shown = """
            + SHOWN
            + """;
          for (const id of ids) {
            const now = shown(id);
            if (now !== null && now.status === "running" && now.step > 0 && now.step !== first[id].step
                && /^\\d+\\.\\d+$/.test(now.loss) && now.loss !== first[id].loss) window.seenTraining[id] = now;
          }
          return ids.filter(id => id in window.seenTraining).length >= seen;
        }""",
            arg=[run_ids, first, seen],
            timeout=SLOW,
        )


def test_the_class_trains_its_own_gpt_and_watches_the_loss_fall(page: Page, live_server: str) -> None:
    page.set_default_timeout(SLOW)
    page.set_viewport_size({"width": 1280, "height": 720})
    lesson = BY_SLUG["train-your-own"]
    page.goto(live_server + step_url(lesson, 1, "en"))
    expect(page.locator(".lesson-panel")).to_contain_text("Before its first step the weights are random")
    form = page.locator(".train-form form")
    expect(form).to_be_visible()
    expect(form.locator("select[name=task]")).to_have_value("repeat")  # the lesson's defaults
    expect(form.locator("input[name=causal]")).to_be_checked()
    form.locator("input[name=steps]").fill(str(STEPS))
    form.get_by_label("and the same run with the mask off, side by side").check()
    form.get_by_role("button", name="Train").click()
    page.wait_for_url(re.compile(r"/train\?run=[\w-]+&compare=[\w-]+.*lesson=train-your-own"))
    honest = re.search(r"run=([\w-]+)", page.url).group(1)  # type: ignore[union-attr]
    twin = re.search(r"compare=([\w-]+)", page.url).group(1)  # type: ignore[union-attr]
    expect(page.locator(".lesson-panel")).to_be_visible()  # the lesson stays beside the runs
    page.evaluate("window.stillTheSamePage = true")  # a reload or a navigation would lose it

    seen_training(page, [honest, twin])  # the honest run (mask on) and its twin (mask off), one after the other

    for run_id in (honest, twin):
        expect(page.locator(f"#run-{run_id}")).to_have_attribute("data-status", "done", timeout=SLOW)
        expect(page.locator(f"#run-{run_id} .train-status")).to_contain_text(f"{STEPS} / {STEPS} steps")
        expect(page.locator(f"#run-{run_id} svg.chart[data-chart=loss]")).to_be_visible()
        expect(page.locator(f"#run-{run_id} a[data-preset]")).to_be_visible()  # "Open it in the lab"
    expect(page.locator("#train-live")).to_have_attribute("data-live", "0")
    expect(page.locator(".train-cheat")).to_contain_text("with the mask off the training loss is")
    assert page.evaluate("window.stillTheSamePage") is True  # all of it redrawn in place, never reloaded


@pytest.fixture(scope="module")
def finished(live_server: str) -> Iterator[tuple[str, str]]:
    """Two short finished runs (mask on, mask off) on the server the browser reads."""
    body = {"steps": 60, "eval_every": 10}
    ids = []
    with httpx.Client(base_url=live_server, timeout=30) as client:
        for causal in (True, False):
            r = client.post("/api/v1/train", json=body | {"causal": causal})
            assert r.status_code == 202, r.text
            ids.append(r.json()["id"])
        for run_id in ids:  # each stream ends with its run
            with client.stream("GET", f"/api/v1/train/{run_id}/events", timeout=None) as events:
                last = [line for line in events.iter_lines() if line.startswith("data: ")][-1]
            assert json.loads(last[6:])["status"] == "done"
    yield ids[0], ids[1]


# Per chart: its numbers' rendered size (font size × the drawing's scale on screen: every text that is a number is a
# tick's), the axis titles, the ticks of each axis.
CHARTS = """() => [...document.querySelectorAll("svg.chart")].map(svg => {
  const size = t => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a;
  const ticks = axis => [...svg.querySelectorAll("text.tick." + axis)];
  return {chart: svg.dataset.chart,
          ticks: [...svg.querySelectorAll("text")].filter(t => /^[\\d.,]+$/.test(t.textContent.trim())).map(size),
          x: ticks("x").map(t => t.textContent), y: ticks("y").map(t => t.textContent),
          titles: [...svg.querySelectorAll("text.axis-title")].map(t => t.textContent.trim()),
          right: svg.getBoundingClientRect().right};
})"""
NUMBERS = """() => [...document.querySelectorAll("dl.train-numbers :is(dt, dd)")]
  .map(el => parseFloat(getComputedStyle(el).fontSize))"""


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("pair", [False, True], ids=["one", "pair"])
def test_presenter_mode_reads_from_the_back_at_1080p(
    page: Page, live_server: str, finished: tuple[str, str], lang: str, pair: bool
) -> None:
    page.set_viewport_size({"width": 1920, "height": 1080})
    honest, twin = finished
    query = f"run={honest}" + (f"&compare={twin}" if pair else "")
    page.goto(f"{live_server}/train?{query}&present=1&lang={lang}")
    expect(page.locator("body")).to_have_class(re.compile(r"\bpresent\b"))
    expect(page.locator("svg.chart[data-chart=loss]").first).to_be_visible()
    numbers = page.evaluate(NUMBERS)
    assert numbers and min(numbers) >= 24, numbers
    charts = page.evaluate(CHARTS)
    assert {c["chart"] for c in charts} == {"loss", "induction"}
    for c in charts:
        assert c["ticks"] and min(c["ticks"]) >= 18, c  # the tick numbers, as drawn on the screen
        assert len(c["titles"]) == 2 and all(c["titles"]), c  # both axes titled
        assert len(c["x"]) >= 3 and len(c["y"]) >= 3, c  # and numbered
        assert all(re.fullmatch(r"[\d.,]+", s) for s in c["x"] + c["y"]), c
        assert c["right"] <= 1920, c  # on the screen, not past its edge


# The live block's redraws the page asks for (htmx's requests from the followers, #train-follow).
ASKS = """window.asked = [];
document.addEventListener("htmx:beforeRequest", e => {
  if (e.detail.elt.closest("#train-follow")) window.asked.push(e.detail.pathInfo.requestPath);
});"""
LIVE = ("queued", "running")
# A live run's stream answered as one burst, as a loaded server sends what piled up: steps, an eval, the end, the
# stream then closed.
BURST = "".join(
    f"id: {i}\nevent: {kind}\ndata: {{}}\n\n" for i, kind in enumerate(["state", "step", "eval", "step", "end"], 1)
)


def test_an_end_right_after_a_step_is_still_redrawn(page: Page, live_server: str) -> None:
    """The run's end asks for the live block again even when it comes within the second a step's redraw holds the
    next one back (htmx's throttle is one per element, for all its triggers: b0fc53e's follower, with the end among
    the steps' triggers, dropped such an end, and the page never showed the run done). Here: one redraw for the
    steps, one for the end."""
    started = page.request.post(f"{live_server}/api/v1/train", data={"steps": 5000}).json()
    run_id = started["id"]
    try:
        page.route("**/api/v1/train/*/events", lambda route: route.fulfill(
            status=200, headers={"Content-Type": "text/event-stream"}, body=BURST))  # fmt: skip
        page.add_init_script(ASKS)
        page.goto(f"{live_server}/train?run={run_id}")
        expect(page.locator("#train-follow [sse-connect]")).to_have_count(1)
        page.wait_for_function("() => window.asked.length >= 2", timeout=60_000)
        assert all(url.startswith("/train?run=") for url in page.evaluate("window.asked"))
    finally:  # the run stopped and ended, so the server that shuts down after this file waits for none
        page.request.post(f"{live_server}/api/v1/train/{run_id}/stop", data={"stop_token": started["stop_token"]})
        status = lambda: page.request.get(f"{live_server}/api/v1/train/{run_id}").json()["status"]  # noqa: E731
        wait_until(lambda: status() not in LIVE, timeout=120, what=f"run {run_id} ended after its stop")
