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
    ("present", "/?stage=4&mask=causal&cell=weights.0.2.1&present=1", [(1280, 720), (1920, 1080)]),
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
    """A live class as it is run: presenter mode reached by pressing its button, a lesson's prepared question asked
    from the teacher's remote on a phone, a student's phone answering it; the projector (no key, no open histogram),
    the remote (live histogram and key) and the phone, in both languages."""
    for lang in ("en", "zh"):
        teacher = browser.new_context(viewport={"width": 1280, "height": 720})
        tp = teacher.new_page()
        tp.goto(f"{base}/?stage=4&mask=causal&lesson=row-one&step=1&lang={lang}")
        tp.click("[data-toggle=present]")
        tp.wait_for_selector("body.present")
        tp.click("[data-room-start] button")
        tp.wait_for_selector("#room [data-room-role=teacher]")
        code = tp.inner_text("[data-room-code-text]").strip()
        remote = teacher.new_page()
        remote.set_viewport_size({"width": 390, "height": 844})
        remote.goto(f"{base}/r/{code}/teach?lang={lang}")
        remote.wait_for_selector("[data-prepared]:not([hidden])")
        remote.click("[data-ask]")
        phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
        sp = phone.new_page()
        sp.goto(f"{base}/r/{code}?lang={lang}")
        sp.wait_for_selector("[data-room-question]:not([hidden])")
        sp.locator("table[data-matrix=weights] td[data-row='0'][data-col='0']").tap()
        sp.wait_for_selector("[data-room-mine]:not([hidden])")
        expect(tp.locator("[data-room-total]")).to_have_text("1")
        expect(remote.locator("[data-total]")).to_have_text("1")
        shots = ((tp, f"room-teacher-1280x720-{lang}"), (sp, f"room-student-390x844-{lang}"),
                 (remote, f"room-remote-390x844-{lang}"))  # fmt: skip
        for page, name in shots:
            out = OTHER_SHOTS / f"{name}.png"
            page.screenshot(path=str(out), full_page=page is remote)
            print(out.relative_to(ROOT))
        teacher.close()
        phone.close()


if __name__ == "__main__":
    raise SystemExit(main())
