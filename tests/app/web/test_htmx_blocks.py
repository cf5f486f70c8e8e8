"""Every page asked for every htmx block the way the page itself asks for it (#42: /train's redraw answered 500 for
weeks because no test requested a page's blocks as its own script does).

The pages are the app's GET HTML routes (a new page is walked without a change here), each in several states: plain,
in Chinese, in presenter mode, beside a lesson's step (every step of every lesson, in both languages), with a
training run finished, running and queued, on the finished run's preset, and inside a live class (the teacher's and
a student's browser, the room's own pages). Each page is read whole, as a browser first loads it, and what it swaps
is then asked for as htmx would ask:

- every element with `hx-get` (a form's fields sent with it), with the `hx-target` / `hx-select` it inherits;
- every boosted link and GET form (`hx-boost="true"` on an ancestor), one of each kind (path and query keys);
- what the page's own scripts fetch with `HX-Request` (`SCRIPTS`: the lab's zoomed tile), and the page's own URL
  (/train's redraw of `#train-live` is an `hx-get` on each live run's event stream).

Each answer must be no 5xx, and a swapped one (2xx, or the inline error of a 422) must hold what is swapped: the
`hx-select`ed element, or the `#target` an outerHTML swap replaces, never a whole page (a whole page swapped into
`#stage` nests a second header in it); its out-of-band swaps must name elements the page has."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urljoin, urlsplit

import pytest
from bs4 import BeautifulSoup, Tag
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.web.lessons import LESSONS, step_url

ROOT = Path(__file__).resolve().parents[3]
TINY = {"n_layer": 1, "n_heads": 2, "d_model": 32, "n_repeat": 8, "vocab": 8, "batch": 8, "steps": 20,
        "eval_every": 5, "n_snapshots": 3}  # fmt: skip
ON_TINY = "text=ABCDABCD&probe_n=4"  # a text the finished run's model reads (its tokens are A…H), a probe it fits
# A Compute button's block (the heads ranked, the pruning curve) is pressed on the finished run's tiny model only:
# on SmolLM2 each press is 5–60 s of work on two busy cores, and the block drawn is the same.
COMPUTE_KEYS = ("prune", "rank")
# Still training (or queued) while the pages are read, on a loaded machine too: the form's most steps (20,000, some
# 7 minutes a run on two busy cores, the twin queued behind it; 3,000 ended before /train was read once the suite
# ran beside a fresh clone); stopped when the file is done.
LONG = TINY | {"steps": 20_000, "eval_every": 100}
SAME_SITE = {"Sec-Fetch-Site": "same-origin"}
NAVIGATION = {"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document", "Sec-Fetch-Site": "same-origin"}
URL_SAFE = "/?&=%:#,+;@!$'()*[]~"
SWAPPED = range(200, 400)  # htmx swaps these (and 422: the inline error), per _base.html's responseHandling


@dataclass(frozen=True)
class Ask:
    """One htmx request a page makes: the URL, what it replaces (`target`) and what it takes from the answer."""

    url: str
    target: str | None  # a CSS selector, as hx-target names it ("#stage", "main"); None: the element itself
    select: str | None = None  # hx-select: the part of the answer swapped in
    swap: str = "innerHTML"
    boosted: bool = False
    why: str = ""  # where the page asks for it, for the failure message

    def expects(self) -> str | None:
        """What the answer must hold for the swap to work again next time."""
        if self.select:
            return self.select
        if self.target and self.target.startswith("#") and self.swap.startswith("outerHTML"):
            return self.target
        return None


# -- what the pages ask for --------------------------------------------------------------------------------------------


def inherited(el: Tag, attr: str) -> str | None:
    """An htmx attribute as htmx reads it: the element's own, or the nearest ancestor's."""
    for node in (el, *el.parents):
        if isinstance(node, Tag) and node.has_attr(attr):
            return str(node[attr])
    return None


def form_query(form: Tag) -> list[tuple[str, str]]:
    """What a browser sends for a form as it stands: every enabled named field's value."""
    sent = []
    for box in form.find_all(attrs={"name": True}):
        if box.has_attr("disabled") or box.name == "button" or box.get("type") in ("submit", "button", "image"):
            continue
        name = str(box["name"])
        if box.name == "textarea":
            sent.append((name, box.get_text()))
        elif box.name == "select":
            chosen = box.find_all("option", selected=True) or box.find_all("option", limit=1)
            sent += [(name, str(o.get("value", o.get_text()))) for o in chosen]
        elif box.get("type") in ("checkbox", "radio"):
            if box.has_attr("checked"):
                sent.append((name, str(box.get("value", "on"))))
        elif box.name == "input":
            sent.append((name, str(box.get("value", ""))))
    return sent


def with_fields(url: str, fields: list[tuple[str, str]]) -> str:
    """A GET form's submission: its action with the fields as the query (the action's own query replaced)."""
    return urlsplit(url).path + ("?" + urlencode(fields) if fields else "")


def local(href: str) -> bool:
    return bool(href) and not href.startswith(("#", "mailto:", "javascript:", "data:")) and urlsplit(href).netloc == ""


def lab_js(page: BeautifulSoup, url: str) -> list[Ask]:
    """static/lab.js: a click on a long view's heat map opens its 16 × 16 window, a hidden link added to <main> (so
    boosted as main's links are) with ROW,COL filled in. (Its keys and ▶ Play click links the page draws.)"""
    asks = []
    for img in page.find_all("img", id="zoom", attrs={"data-tile-url": True}):
        href = str(img["data-tile-url"]).replace("ROW%2CCOL", "0%2C0").replace("ROW,COL", "0,0")
        main = img.find_parent("main") or img
        asks.append(Ask(urljoin(url, href), inherited(main, "hx-target"), inherited(main, "hx-select"),
                        inherited(main, "hx-swap") or "innerHTML", boosted=True, why="lab.js's zoomed tile"))  # fmt: skip
    return asks


def room_js(page: BeautifulSoup, url: str) -> list[Ask]:
    """static/room.js fetches whole pages (no HX-Request: a follower's screen takes the teacher's next view whole)
    and the room's bar, and a poll's box (/r/{code}/poll/{id}: a fragment of its own, swapped whole); it asks for
    no block."""
    return []


def teach_js(page: BeautifulSoup, url: str) -> list[Ask]:
    """static/teach.js: the open poll's live results (/r/{code}/poll/{id}/live, a fragment of its own swapped whole
    into the remote's [data-live]); no block of a page."""
    return []


# Every script that makes htmx requests or hands htmx new elements says here what it asks for.
SCRIPTS: dict[str, Callable[[BeautifulSoup, str], list[Ask]]] = {
    "/static/lab.js": lab_js,
    "/static/room.js": room_js,
    "/static/teach.js": teach_js,
}


def asks_of(page: BeautifulSoup, url: str) -> list[Ask]:
    """Everything `page` (loaded from `url`) asks for as htmx: its hx-get elements, one boosted link or form of each
    kind, its scripts' requests and its own URL."""
    asks = [Ask(url, None, why="the page's own URL")]
    for el in page.find_all(attrs={"hx-get": True}):
        target = inherited(el, "hx-target")
        href = urljoin(url, str(el["hx-get"]).partition("#")[0])  # a fragment is never sent
        if el.name == "form":
            href = with_fields(href, form_query(el))
        asks.append(Ask(href, target, inherited(el, "hx-select"), inherited(el, "hx-swap") or "innerHTML",
                        why=f"hx-get on <{el.name}> {dict(list(el.attrs.items())[:3])}"))  # fmt: skip
    kinds: set[tuple[str, frozenset[str]]] = set()
    for el in page.find_all(["a", "form"]):
        if (el.name == "a" and not el.has_attr("href")) or el.has_attr("hx-get") or inherited(el, "hx-boost") != "true":
            continue
        if el.name == "a":
            href = str(el["href"])
            if not local(href) or el.has_attr("download") or el.get("target") == "_blank":
                continue
            href = urljoin(url, href.partition("#")[0])
        else:
            if str(el.get("method", "get")).lower() != "get" or el.get("target") == "_blank":
                continue
            href = with_fields(urljoin(url, str(el.get("action") or url)), form_query(el))
        kind = (urlsplit(href).path, frozenset(k for k, _ in parse_qsl(urlsplit(href).query)))
        if kind in kinds:
            continue
        kinds.add(kind)
        asks.append(Ask(href, inherited(el, "hx-target"), inherited(el, "hx-select"),
                        inherited(el, "hx-swap") or "innerHTML", boosted=True,
                        why=f"boosted <{el.name}> {el.get('href') or el.get('action')}"))  # fmt: skip
    for script in page.find_all("script", src=True):
        src = urlsplit(str(script["src"])).path
        if src in SCRIPTS:
            asks += SCRIPTS[src](page, url)
    return asks


def check(client: TestClient, url: str, swapped: set[str] | None = None) -> list[str]:
    """`url` loaded as a browser navigates to it (a heavy page answers with its shell, which asks htmx for the page)
    and whole, then everything each asks for as htmx: what went wrong, in words (and into `swapped`, the selectors
    that a 200 answer held)."""
    wrong = []
    shown = []
    for headers in (NAVIGATION, {}):
        r = client.get(quote(url, safe=URL_SAFE), headers=headers)
        if r.status_code >= 500:
            return [f"{url}: the page itself answers {r.status_code}"]
        shown.append(BeautifulSoup(r.text, "html.parser"))
        if shown[0].find(attrs={"data-deferred": True}) is None:
            break  # the navigation had the page itself
    for page in shown:
        wrong += asks_answered(client, url, page, swapped)
    return wrong


SIMPLE = re.compile(r"#(?P<id>[A-Za-z][\w-]*)|(?P<tag>[a-z][a-z0-9]*)")


class Tags(HTMLParser):
    """An answer's start tags as BeautifulSoup's "html.parser" reads them (the same tokenizer with bs4's
    `convert_charrefs=False`, a repeated attribute's last value kept, a bare one as ""), without building its tree:
    an answer is read for one element (an `#id` or a tag name) and its out-of-band swaps' ids, and building the
    tree and matching the selector took half of this file's time (answers are whole pages that `hx-select` cuts
    from). Any other selector is matched by BeautifulSoup itself."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=False)
        self.text = text
        self.names: set[str] = set()
        self.ids: set[str] = set()
        self.oob: list[str] = []  # the id of each element with hx-swap-oob ("" where it has none)
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        got = {k: "" if v is None else v for k, v in attrs}
        self.names.add(tag)
        if "id" in got:
            self.ids.add(got["id"])
        if "hx-swap-oob" in got:
            self.oob.append(got.get("id", ""))

    def has(self, selector: str) -> bool:
        """Whether an element matches `selector`, as `BeautifulSoup(text, "html.parser").select_one` finds it."""
        simple = SIMPLE.fullmatch(selector)
        if simple is None:
            return BeautifulSoup(self.text, "html.parser").select_one(selector) is not None
        return simple["id"] in self.ids if simple["id"] else simple["tag"] in self.names


@lru_cache(maxsize=64)
def tags(text: str) -> Tags:
    """An answer's tags, read once: the pages' menus ask for the same pages (one state's answers the same) again and
    again."""
    return Tags(text)


def asks_answered(client: TestClient, url: str, page: BeautifulSoup, swapped: set[str] | None) -> list[str]:
    ids = {str(el["id"]) for el in page.find_all(id=True)}
    wrong = []
    for ask in asks_of(page, url):
        headers = {"HX-Request": "true", "HX-Current-URL": "http://testserver" + quote(url, safe=URL_SAFE)}
        if ask.target and ask.target.startswith("#"):
            headers["HX-Target"] = ask.target[1:]
        if ask.boosted:
            headers["HX-Boosted"] = "true"
        query = dict(parse_qsl(urlsplit(ask.url).query))
        if any(query.get(k) == "1" for k in COMPUTE_KEYS) and not query.get("preset", "").startswith("train-"):
            continue
        got = client.get(quote(ask.url, safe=URL_SAFE), headers=headers)  # as a browser sends what a page wrote
        where = f"{url} → {ask.url} ({ask.why})"
        if got.status_code >= 500:
            wrong.append(f"{where}: {got.status_code} {got.text[:200]}")
            continue
        if got.status_code not in SWAPPED and got.status_code != 422:
            continue  # not swapped: htmx leaves the page as it is (a busy server's 429 says when to try again)
        fragment = tags(got.text)
        expected = ask.expects()
        if expected and not fragment.has(expected):
            wrong.append(f"{where}: {got.status_code} without {expected}: {got.text[:200]!r}")
        elif expected and got.status_code == 200 and swapped is not None:
            swapped.add(expected)
        if not ask.select and ask.target and re.search(r"<body[\s>]", got.text):
            wrong.append(f"{where}: a whole page swapped into {ask.target}")
        for oob in fragment.oob:
            if oob and oob not in ids:
                wrong.append(f"{where}: an out-of-band #{oob} the page has not")
    return wrong


# -- the pages ---------------------------------------------------------------------------------------------------------


def page_routes() -> list[str]:
    """The app's GET pages (HTML), path parameters still in braces."""
    app = create_app(Settings(device="cpu", pretrained=False))
    routes = [c.original_route for c in iter_route_contexts(app.routes)]
    return sorted(
        r.path
        for r in routes
        if isinstance(r, APIRoute)
        and "GET" in (r.methods or ())
        and getattr(r.response_class, "media_type", None) == "text/html"
    )


PAGES = page_routes()


@dataclass
class Lab:
    client: TestClient
    done: str  # a finished run (served as the preset train-<id>)
    live: str  # a long run, training
    queued: str  # its mask-off twin, waiting for the trainer
    room: str = ""
    teacher: TestClient | None = None
    student: TestClient | None = None
    covered: set[str] = field(default_factory=set)


def wait_for_end(client: TestClient, run_id: str) -> None:
    with client.stream("GET", f"/api/v1/train/{run_id}/events") as r:
        for line in r.iter_lines():
            if line.startswith("event: end"):
                return


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    app = create_app(Settings(device="cpu", train_max_running=1, train_max_queued=2, train_max_steps=20_000,
                              train_max_wall_s=3600))  # fmt: skip
    with TestClient(app, raise_server_exceptions=False) as client:
        done = client.post("/api/v1/train", json=TINY).json()["id"]
        wait_for_end(client, done)
        assert client.get(f"/api/v1/train/{done}").json()["preset"] == f"train-{done}"
        form = {k: str(v) for k, v in LONG.items()} | {"causal": "1", "cheat": "1", "lang": "en"}
        started = client.post("/train", data=form, headers=SAME_SITE, follow_redirects=False)
        assert started.status_code == 303, started.text
        where = started.headers["location"]
        live, queued = where.split("run=")[1].split("&")[0], where.split("compare=")[1].split("&")[0]
        teacher, student = (TestClient(app, raise_server_exceptions=False) for _ in range(2))
        r = teacher.post("/r", data={"page": "/", "query": "stage=softmax&present=1", "lang": "en"}, headers=SAME_SITE,
                         follow_redirects=False)  # fmt: skip
        assert r.status_code == 303, r.text[:300]
        room = teacher.cookies["lab_room"]
        assert student.get(f"/r/{room}", follow_redirects=False).status_code == 303
        yield Lab(client, done, live, queued, room, teacher, student)
        for run_id in (live, queued):
            client.post(f"/api/v1/train/{run_id}/stop")
        for run_id in (live, queued):
            wait_for_end(client, run_id)


def filled(path: str, lab: Lab) -> list[str]:
    """A route's path with its parameters filled in: every lesson, the class's room, a pairing link."""
    if "{slug}" in path:
        return [path.replace("{slug}", lesson.slug) for lesson in LESSONS]
    values = {"code": lab.room, "secret": "x" * 22, "poll_id": "none"}  # a poll the room never had: its empty box
    names = re.findall(r"{(\w+)}", path)
    assert set(names) <= set(values), f"{path}: say here how to fill in {set(names) - set(values)}"
    for name in names:
        path = path.replace("{" + name + "}", values[name])
    return [path]


def states(path: str, lab: Lab) -> list[str]:
    """The states each page is read in (the lesson steps are read on the pages they name, below)."""
    q = "&" if "?" in path else "?"
    urls = [path, f"{path}{q}present=1&lang=zh", f"{path}{q}lesson=train-your-own&lesson_step=2",
            f"{path}{q}preset=train-{lab.done}&{ON_TINY}&present=1"]  # fmt: skip
    if path == "/train":
        urls += [f"/train?run={lab.done}", f"/train?run={lab.done}&lang=zh&present=1",
                 f"/train?run={lab.live}&compare={lab.queued}", f"/train?run={lab.live}&compare={lab.queued}&lang=zh",
                 f"/train?run={lab.done}&snap=0", "/train?run=latest&compare=latest-unmasked&present=1",
                 "/train?run=nope", f"/train?run={lab.done}&compare={lab.live}&lesson=train-your-own&lesson_step=4"]  # fmt: skip
    return urls


# What a page's walk must have seen swapped at least once (the walk is not vacuous: the asks were found and answered).
SWAPS = {"/": "#stage", "/block": "#stage", "/decode": "#stage", "/train": "#train-live", "/predict": "#ranking",
         "/heads": "#prune", "/patch": "main"}  # fmt: skip


@pytest.mark.parametrize("route", PAGES)
def test_every_block_a_page_asks_for_is_there(lab: Lab, route: str) -> None:
    wrong: list[str] = []
    swapped: set[str] = set()
    for path in filled(route, lab):
        for url in states(path, lab):
            wrong += check(lab.client, url, swapped)
    assert wrong == [], "\n".join(wrong)
    if route in SWAPS:
        assert SWAPS[route] in swapped, swapped


@pytest.mark.parametrize("lesson", [lesson.slug for lesson in LESSONS])
def test_every_lesson_step_asks_for_blocks_that_are_there(lab: Lab, lesson: str) -> None:
    """Each step's page as the lesson opens it, in English and in presenter mode in Chinese (the training lesson's
    steps name the class's runs: `latest`, `latest-unmasked`)."""
    wrong = []
    (found,) = [x for x in LESSONS if x.slug == lesson]
    for k in range(1, len(found.steps) + 1):
        for url in (step_url(found, k, "en"), step_url(found, k, "zh", {"present": "1"})):
            wrong += check(lab.client, url.partition("#")[0])
    assert wrong == [], "\n".join(wrong)


@pytest.mark.parametrize("who", ["teacher", "student"])
def test_in_a_class_every_block_is_there(lab: Lab, who: str) -> None:
    """The class's view and the room's pages, with the teacher's or a student's cookies."""
    client = lab.teacher if who == "teacher" else lab.student
    assert client is not None
    wrong = []
    if who == "teacher":  # a class started on the training page: the room asks the lab for its block first
        view = {"page": "/train", "query": f"run={lab.live}&compare={lab.queued}&present=1", "lang": "en"}
        r = TestClient(client.app).post("/r", data=view, headers=SAME_SITE, follow_redirects=False)
        if r.status_code != 303:
            wrong.append(f"a class started on /train: {r.status_code} {r.headers.get('x-lab-error', r.text[:200])}")
    urls = [f"/train?run={lab.live}&compare={lab.queued}&present=1&lang=en", "/?stage=softmax&lang=zh",
            *(u for route in PAGES if route.startswith("/r/") for u in filled(route, lab))]  # fmt: skip
    for url in urls:
        wrong += check(client, url)
    assert wrong == [], "\n".join(wrong)


def test_every_script_that_asks_htmx_is_known() -> None:
    """A script that sends HX-Request or hands htmx elements of its own says in SCRIPTS what it asks for."""
    asking = {f"/static/{p.name}" for p in (ROOT / "static").glob("*.js")
              if re.search(r"HX-Request|htmx\.(ajax|process)", p.read_text())}  # fmt: skip
    assert asking <= set(SCRIPTS), asking - set(SCRIPTS)
    assert {"/", "/train", "/lessons/{slug}", "/r/{code}"} <= set(PAGES)  # the routes are read
