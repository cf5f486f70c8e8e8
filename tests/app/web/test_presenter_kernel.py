"""Presenter mode is a layout of every page (the kernel's, app/web/page.py and templates/_base.html): any page takes
`present=1`, offers the switch, and keeps presenter mode, the hints switch and a lesson step through every link and
every form it draws."""

from __future__ import annotations

import re
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


# Every page a teacher can project, walked in presenter mode (#32: links to other pages dropped it).
WALK = [*PAGES, "/heads", "/patch", "/train", "/lessons/mask-toggle"]
# What may leave presenter mode or is no page: the switch out of it, downloads, the JSON/API twins and files, the API
# docs, a room's own pages (the teacher's remote) and POST forms (an action: starting a class, stopping a run).
NOT_KEPT = re.compile(r"^/(?:api/|static/|vendor/|docs|openapi|r(?:/|$))|\.(?:json|npz|svg|csv|png)(?:$|\?)")


def kept_out(tag: Any, url: str) -> bool:
    return (tag.get("data-toggle") == "present" or tag.has_attr("download")
            or not url.startswith("/") or url.startswith("//") or bool(NOT_KEPT.search(url.split("?")[0])))  # fmt: skip


@pytest.mark.parametrize("url", WALK)
def test_every_internal_link_and_form_of_every_page_keeps_presenter_mode_and_the_language(
    client: Any, url: str
) -> None:
    page = get(client, with_query(url, "present=1&hints=off&lang=zh"))
    links = [a for a in page.select("a[href]") if not kept_out(a, a["href"])]
    assert links, url
    for a in links:
        q = parse_qs(urlsplit(a["href"]).query)
        lang = a.get("data-lang", "zh")  # the language switch changes only the language
        assert q.get("present") == ["1"] and q.get("lang") == [lang] and q.get("hints") == ["off"], (url, a["href"])
    forms = [f for f in page.select("form") if (f.get("method") or "get").lower() == "get"]
    for form in forms:
        assert not kept_out(form, form.get("action") or "/"), (url, form.get("action"))
        fields = {i.get("name"): i.get("value") for i in form.select("input[name]")}
        assert fields.get("present") == "1" and fields.get("lang") == "zh", (url, form.get("action"), fields)
    if urlsplit(url).path != "/lessons":
        lessons = page.select_one("header.top a[data-present-nav][href^='/lessons']")
        assert lessons is not None and "present=1" in lessons["href"], "the lessons stay reachable in presenter mode"


def test_leaving_presenter_mode_and_the_twins_are_the_only_links_that_drop_it(client: Any) -> None:
    page = get(client, "/?present=1&lang=zh")
    dropped = {a["href"].split("?")[0] for a in page.select("a[href]") if "present=1" not in a["href"]}
    assert dropped <= {"/", "/index.json", "/docs"} | {u for u in dropped if NOT_KEPT.search(u)}, dropped
    leave = page.select("a[data-toggle=present]")
    assert len(leave) == 1 and "present" not in parse_qs(urlsplit(leave[0]["href"]).query)


def test_url_adds_what_the_screen_carries_to_pages_only() -> None:
    """The templates' `url()` (app/templating.py `kept_url`): a page's link gains what it lacks, its fragment last;
    files, the API, a room's pages and other sites are left alone."""
    from app.templating import kept_url

    carry = {"present": "1", "hints": "off"}
    assert kept_url("/block?layer=1#stage", carry) == "/block?layer=1&present=1&hints=off#stage"
    assert kept_url("/?present=1&hints=on", carry) == "/?present=1&hints=on"  # what it names stays
    assert kept_url("/lessons", {}) == "/lessons"
    for url in ("/api/v1/attention?x=1", "/index.json", "/static/lab.css", "/r/ABCD", "/docs", "//x.org/", "#top"):
        assert kept_url(url, carry) == url
