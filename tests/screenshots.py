"""`make screenshots`: pictures of the lab as a class meets it, for the README and for looking before a release.

Starts `attention-lab serve` on a free loopback port and photographs, with Debian's Chromium through Playwright,
presenter mode at 1280×720 and 1920×1080 and the lab on a 390×844 phone, in English and Chinese. The README's two
presenter-mode pictures are written to static/screenshots/; the rest to shots/ (not committed).

    python -m tests.screenshots
"""

from __future__ import annotations

from playwright.sync_api import Browser, expect, sync_playwright

from .servers import ROOT, served

README_SHOTS = ROOT / "static" / "screenshots"
OTHER_SHOTS = ROOT / "shots"
VIEWS = [
    ("present", "/?stage=3&present=1", [(1280, 720), (1920, 1080)]),
    ("present-compare", "/?stage=4&compare=mask&present=1", [(1280, 720)]),
    ("lab-phone", "/?stage=4", [(390, 844)]),
    ("lesson", "/?stage=3&lesson=five-stages&step=3", [(1280, 900)]),
    ("heatmap", "/?preset=gpt2-small&stage=4&tokens=" + "+".join(f"w{i}" for i in range(64)), [(1280, 1000)]),
]


def main() -> int:
    README_SHOTS.mkdir(parents=True, exist_ok=True)
    OTHER_SHOTS.mkdir(exist_ok=True)
    with served({"PUBLIC_URL": "http://lab.school.example"}) as (base, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        for name, url, sizes in VIEWS:
            for width, height in sizes:
                for lang in ("en", "zh"):
                    page = browser.new_page(viewport={"width": width, "height": height})
                    page.goto(f"{base}{url}&lang={lang}")
                    page.wait_for_load_state("networkidle")
                    readme = name == "present" and (width, height) == (1280, 720)
                    out = (README_SHOTS if readme else OTHER_SHOTS) / f"{name}-{width}x{height}-{lang}.png"
                    page.screenshot(path=str(out))
                    page.close()
                    print(out.relative_to(ROOT))
        room_shots(browser, base)
        browser.close()
    return 0


def room_shots(browser: Browser, base: str) -> None:
    """A live class: the teacher in presenter mode (the room's QR and code), with a poll's answers coming in, and a
    student's phone answering it, in both languages."""
    for lang in ("en", "zh"):
        teacher = browser.new_context(viewport={"width": 1280, "height": 720})
        tp = teacher.new_page()
        tp.goto(f"{base}/?stage=4&lang={lang}")
        tp.click("[data-room-start] button")
        tp.wait_for_selector("#room [data-room-role=teacher]")
        code = tp.inner_text("[data-room-code-text]").strip()
        options = "猫, 坐, 在" if lang == "zh" else "cat, sat, on"
        prompt = "“坐”最关注哪个词？" if lang == "zh" else "Which token does “sat” attend to most?"
        tp.click(".room-poll-form summary")
        tp.fill("[data-room-poll-form] input[name=prompt]", prompt)
        tp.fill("[data-room-poll-form] input[name=options]", options)
        tp.click("[data-room-poll-form] button[type=submit]")
        phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
        sp = phone.new_page()
        sp.goto(f"{base}/r/{code}?lang={lang}")
        sp.wait_for_selector("[data-room-question]:not([hidden])")
        sp.click("[data-room-options] button >> nth=0")
        sp.wait_for_selector("[data-room-mine]:not([hidden])")
        expect(tp.locator("[data-room-total]")).to_have_text("1")
        tp.goto(f"{base}/?stage=4&present=1&lang={lang}")
        tp.wait_for_selector("aside.qr[data-room-join]")
        for page, name in ((tp, f"room-teacher-1280x720-{lang}"), (sp, f"room-student-390x844-{lang}")):
            out = OTHER_SHOTS / f"{name}.png"
            page.screenshot(path=str(out))
            print(out.relative_to(ROOT))
        teacher.close()
        phone.close()


if __name__ == "__main__":
    raise SystemExit(main())
