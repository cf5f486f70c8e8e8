"""`make screenshots`: pictures of the lab as a class meets it, for the README and for looking before a release.

Starts `attention-lab serve` on a free loopback port and photographs, with Debian's Chromium through Playwright,
presenter mode at 1280×720 and 1920×1080 and the lab on a 390×844 phone, in English and Chinese. The README's two
presenter-mode pictures are written to static/screenshots/; the rest to shots/ (not committed).

    python -m tests.screenshots
"""

from __future__ import annotations

from playwright.sync_api import sync_playwright

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
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
