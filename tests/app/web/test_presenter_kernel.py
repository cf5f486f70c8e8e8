"""Presenter mode is a layout of every page (the kernel's, app/web/page.py and templates/_base.html): any page takes
`present=1`, offers the switch, and keeps presenter mode, the hints switch and a lesson step through every link and
every form it draws."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from bs4 import BeautifulSoup

LESSON = "lesson=five-stages&lesson_step=2"
PAGES = ["/block", "/decode", "/generate?max_new_tokens=2", "/sinks", "/tiles", "/demos", "/params", "/lessons",
         "/lessons/five-stages", "/models", "/", "/predict", "/lens", "/model"]  # fmt: skip
OWN_SWITCH = {"/", "/predict", "/lens", "/model"}  # pages that draw the switch among their own toggles


def get(client: Any, url: str) -> BeautifulSoup:
    r = client.get(url)
    assert r.status_code == 200, (url, r.status_code, r.headers.get("x-lab-error"))
    return BeautifulSoup(r.text, "html.parser")


def with_query(url: str, query: str) -> str:
    return url + ("&" if "?" in url else "?") + query


@pytest.mark.parametrize("url", PAGES)
def test_every_page_has_presenter_mode_and_a_switch_out_of_it(client: Any, url: str) -> None:
    page = get(client, with_query(url, f"present=1&{LESSON}&lang=en"))
    assert "present" in page.body["class"]
    toggles = page.select("a[data-toggle=present]")
    assert len(toggles) == 1, "one switch per page"
    assert ("data-kernel" in toggles[0].attrs) == (urlsplit(url).path not in OWN_SWITCH)
    leave = parse_qs(urlsplit(toggles[0]["href"]).query)
    assert "present" not in leave and leave.get("lesson_step") == ["2"]  # leaving keeps the lesson
    plain = get(client, with_query(url, "lang=en"))
    assert "present" not in (plain.body.get("class") or [])
    enter = parse_qs(urlsplit(plain.select_one("a[data-toggle=present]")["href"]).query)
    assert enter.get("present") == ["1"]


@pytest.mark.parametrize("url", [u for u in PAGES if not urlsplit(u).path.startswith(("/lessons", "/models"))])
def test_every_link_and_form_keeps_presenter_mode_hints_and_the_lesson(client: Any, url: str) -> None:
    page = get(client, with_query(url, f"present=1&hints=off&{LESSON}&lang=en"))
    path = urlsplit(url).path
    own = [a["href"] for a in page.select("main a[href]") if urlsplit(a["href"]).path == path
           and not {"data-toggle", "data-lesson-step"} & set(a.attrs)]  # a lesson's own links go to other steps  # fmt: skip
    for href in own:
        q = parse_qs(urlsplit(href).query)
        assert q.get("present") == ["1"] and q.get("hints") == ["off"] and q.get("lesson_step") == ["2"], href
    forms = [f for f in page.select("main form[method=get]") if f.get("action", "").split("#")[0] in (path, "")]
    for form in forms:
        fields = {i.get("name"): i.get("value") for i in form.select("input[type=hidden]")}
        assert fields.get("present") == "1" and fields.get("hints") == "off", (url, form.get("action"), fields)
        assert fields.get("lesson") == "five-stages" and fields.get("lesson_step") == "2"
    assert own or forms, f"{url} has links or forms of its own"


def test_a_lessons_steps_carry_presenter_mode_from_the_lesson_page(client: Any) -> None:
    page = get(client, "/lessons/five-stages?present=1&lang=en")
    steps = [a["href"] for a in page.select("li.lesson-step a[href]")]
    assert steps and all("present=1" in href for href in steps)
