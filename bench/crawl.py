"""Crawl a running lab and write what each answer shows, one JSON file per request (#43's "before and after").

    python bench/crawl.py http://127.0.0.1:8101 /work/crawl-out/old
    python bench/crawl.py http://127.0.0.1:8102 /work/crawl-out/new
    python bench/crawl_compare.py /work/crawl-out/old /work/crawl-out/new

A fixed list of requests: every page of the header's menu (and /embed, a lesson, /patch, the join page) in English
and Chinese, in presenter mode, as its `.json` twin; the lab's five stages and an open cell also as htmx fragments
(`HX-Request: true`); bad input; the JSON API (GET and POST of the same request); a class (a teacher starts a room
by the page's form and by the API, a student joins and follows, the teacher moves on, the student follows).

Each file holds the status, the content type, a redirect's target, and what the answer shows: for HTML the numbers
of its main content in order (as displayed), its links' and forms' targets (query keys sorted), its error messages
and its `<title>`; for JSON the parsed document. Room codes, teacher tokens and other per-run secrets are replaced
by placeholders so two runs compare. Loopback only; the standard library and httpx.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx

LAB = {"tokens": "the cat sat on the mat", "d_model": "8", "n_heads": "2", "mask": "causal", "seed": "3"}
STAGES = ("projection", "scores", "mask", "softmax", "weighted_sum")
LONG = " ".join(f"w{i}" for i in range(1100))  # past the lab's token limit (max_tokens: 1024)

# The pages both trees serve (the menu of ca65571 plus the pages reached from it), each with its query.
PAGES: dict[str, tuple[str, dict[str, str]]] = {
    "lab": ("/", {}),
    "lab_q": ("/", LAB),
    "embed": ("/embed", LAB),
    "lessons": ("/lessons", {}),
    "lesson": ("/lessons/five-stages", {}),
    "lesson_step": ("/lessons/five-stages", {"lesson_step": "2"}),
    "block": ("/block", {}),
    "block_q": ("/block", LAB),
    "decode": ("/decode", {}),
    "decode_q": ("/decode", LAB),
    "model": ("/model", {}),
    "sinks": ("/sinks", {}),
    "generate": ("/generate", {}),
    "predict": ("/predict", {}),
    "lens": ("/lens", {}),
    "heads": ("/heads", {}),
    "patch": ("/patch", {}),
    "train": ("/train", {}),
    "tiles": ("/tiles", {}),
    "tiles_q": ("/tiles", LAB),
    "demos": ("/demos", {}),
    "demos_q": ("/demos", {"tokens": "cat sat on the mat"}),
    "params": ("/params", {}),
    "models": ("/models", {}),
    "room_join": ("/r", {}),
}
# Pages only the new tree has (crawled, listed as new, not compared).
NEW_PAGES: dict[str, tuple[str, dict[str, str]]] = {
    "generate_samples": ("/generate/samples", {}),
    "attribution": ("/attribution", {}),
    "cross": ("/cross", {}),
    "architectures": ("/architectures", {}),
    "cost": ("/cost", {}),
}
# Each page's parameters (ca65571's spellings), good and bad.
EXTRA: dict[str, tuple[str, dict[str, str]]] = {
    "lab_stage_number": ("/", LAB | {"stage": "4"}),
    "lab_lesson": ("/", LAB | {"lesson": "five-stages", "lesson_step": "3"}),
    "lab_lesson_alias": ("/", LAB | {"lesson": "five-stages", "step": "2"}),
    "lab_lesson_bad_step": ("/", LAB | {"lesson": "five-stages", "lesson_step": "0"}),
    "lab_compare_mask": ("/", LAB | {"stage": "softmax", "compare": "mask"}),
    "lab_compare_scale": ("/", LAB | {"stage": "softmax", "compare": "scale"}),
    "lab_compare_text": ("/", LAB | {"stage": "softmax", "compare": "text", "compare_text": "a dog sat on a rug"}),
    "lab_compare_bad": ("/", LAB | {"compare": "bogus"}),
    "lab_hints_off": ("/", LAB | {"hints": "0", "stage": "scores"}),
    "lab_color": ("/", LAB | {"stage": "scores", "color": "diverging"}),
    "lab_bad_cell": ("/", LAB | {"cell": "zz"}),
    "lab_bad_tile": ("/", LAB | {"tile": "a"}),
    "lab_neg_head": ("/", LAB | {"head": "-1"}),
    "lab_bad_mask": ("/", LAB | {"mask": "bogus"}),
    "lab_unknown_key": ("/", LAB | {"bogus": "1"}),
    "lab_gpt2": ("/", {"preset": "gpt2-small", "stage": "softmax", "head": "3"}),
    "lab_smollm2": ("/", {"preset": "smollm2", "text": "The cat sat on the mat", "layer": "3", "stage": "softmax"}),
    "lab_large": (
        "/",
        {
            "tokens": " ".join(f"t{i}" for i in range(80)),
            "d_model": "8",
            "n_heads": "2",
            "stage": "softmax",
            "tile": "1,0",
        },
    ),
    "embed_hide": ("/embed", LAB | {"hide": "controls", "stage": "mask"}),
    "block_stage": ("/block", LAB | {"stage": "attn"}),
    "block_bad_stage": ("/block", LAB | {"stage": "bogus"}),
    "decode_step": ("/decode", LAB | {"step": "3"}),
    "decode_bad_step": ("/decode", LAB | {"step": "99"}),
    "tiles_block": ("/tiles", LAB | {"qb": "1", "kb": "0"}),
    "tiles_bad": ("/tiles", LAB | {"qb": "99"}),
    "sinks_head": ("/sinks", {"head": "3"}),
    "sinks_bad_head": ("/sinks", {"head": "99"}),
    "model_stat": ("/model", {"stat": "sink", "layer": "2", "head": "1"}),
    "model_ablate": ("/model", {"ablate": "0.1"}),
    "model_heads_alias": ("/model", {"heads": "0.1"}),
    "model_bad_stat": ("/model", {"stat": "bogus"}),
    "predict_pos": ("/predict", {"text": "The cat sat on the", "pos": "2"}),
    "predict_ablate": ("/predict", {"text": "The cat sat on the", "heads": "0.1"}),
    "predict_bad_pos": ("/predict", {"text": "The cat sat on the", "pos": "99"}),
    "lens_start": ("/lens", {"text": "The cat sat on the mat", "start": "1"}),
    "heads_role": ("/heads", {"role": "previous"}),
    "heads_bad_role": ("/heads", {"role": "bogus"}),
    "generate_text": ("/generate", {"text": "Hello, my name is", "max_new_tokens": "4"}),
    "generate_bad": ("/generate", {"max_new_tokens": "0"}),
    "params_preset": ("/params", {"preset": "gpt2-small"}),
    "params_custom": ("/params", {"n_layer": "2", "d_model": "64", "n_heads": "4"}),
    "demos_bad_perm": ("/demos", {"perm": "1,1,1"}),
    "lessons_bad": ("/lessons/no-such", {}),
}
API_BODY = {
    "tokens": ["the", "cat", "sat", "on", "the", "mat"],
    "d_model": 8,
    "n_heads": 2,
    "mask": "causal",
    "seed": 3,
}


def twin(path: str) -> str:
    return ("/index" if path == "/" else path) + ".json"


def requests() -> list[dict[str, Any]]:
    """The fixed list: name, method, path, query, headers, body."""
    out: list[dict[str, Any]] = []

    def add(name: str, path: str, query: dict[str, str] | None = None, **kw: Any) -> None:
        out.append({"name": name, "method": kw.pop("method", "GET"), "path": path, "query": query or {}, **kw})

    def pages(group: str, pages: dict[str, tuple[str, dict[str, str]]]) -> None:
        for name, (path, query) in pages.items():
            for lang in ("en", "zh"):
                add(f"{group}.{name}.{lang}", path, query | {"lang": lang})
                add(f"{group}.{name}.{lang}.present", path, query | {"lang": lang, "present": "1"})
            if path != "/r":
                add(f"{group}.{name}.json", twin(path), query)
                add(f"{group}.{name}.htmx", path, query, headers={"HX-Request": "true"})

    pages("page", PAGES)
    for stage in STAGES:
        q = LAB | {"stage": stage}
        for lang in ("en", "zh"):
            add(f"stage.{stage}.{lang}", "/", q | {"lang": lang})
            add(f"stage.{stage}.{lang}.present", "/", q | {"lang": lang, "present": "1"})
            add(f"stage.{stage}.{lang}.htmx", "/", q | {"lang": lang}, headers={"HX-Request": "true"})
        add(f"stage.{stage}.json", "/index.json", q)
    cell = LAB | {"stage": "softmax", "cell": "weights.1.3.1", "head": "1"}
    add("cell.en", "/", cell)
    add("cell.zh", "/", cell | {"lang": "zh"})
    add("cell.htmx", "/", cell, headers={"HX-Request": "true"})
    add("cell.json", "/index.json", cell)
    for name, q in {
        "bad_stage": LAB | {"stage": "bogus"},
        "bad_d_model": LAB | {"d_model": "7"},
        "bad_d_model_text": LAB | {"d_model": "abc"},
        "too_long": LAB | {"tokens": LONG},
        "bad_head": LAB | {"head": "9"},
    }.items():
        for lang in ("en", "zh"):
            add(f"bad.{name}.{lang}", "/", q | {"lang": lang})
        add(f"bad.{name}.htmx", "/", q, headers={"HX-Request": "true"})
        add(f"bad.{name}.json", "/index.json", q)
    add("bad.block_d_model.en", "/block", {"d_model": "7", "n_heads": "2"})
    add("bad.block_d_model.json", "/block.json", {"d_model": "7", "n_heads": "2"})
    add("bad.lesson.en", "/lessons/no-such-lesson", {})
    add("bad.lesson_step.en", "/lessons/five-stages", {"lesson_step": "99"})
    # The API: the same request as GET and POST.
    api_q = LAB
    for path in ("/api/v1/attention", "/api/v1/block", "/api/v1/decode", "/api/v1/attention/tiles"):
        name = path.removeprefix("/api/v1/").replace("/", "_")
        add(f"api.{name}.get", path, api_q)
        add(f"api.{name}.post", path, method="POST", json=API_BODY)
    add("api.attention.bad_get", "/api/v1/attention", LAB | {"d_model": "7"})
    add("api.attention.bad_post", "/api/v1/attention", method="POST", json=API_BODY | {"d_model": 7})
    add("api.attention.bad_text", "/api/v1/attention", LAB | {"d_model": "abc"})
    add("api.attention.too_long", "/api/v1/attention", LAB | {"tokens": LONG})
    add("api.attention.bad_stage", "/api/v1/attention", LAB | {"stages": "bogus"})
    for path in ("/api/v1/presets", "/api/v1/lessons", "/api/v1/lessons/five-stages", "/api/v1/params",
                 "/api/v1/demo/all", "/api/v1/models", "/healthz"):  # fmt: skip
        add("api." + path.removeprefix("/api/v1/").replace("/", "_"), path)
    # Each page's own parameters, older spellings, and refusals: the page (en), its twin, and htmx where it swaps.
    for name, (path, query) in EXTRA.items():
        add(f"extra.{name}.en", path, query)
        add(f"extra.{name}.zh", path, query | {"lang": "zh"})
        add(f"extra.{name}.json", twin(path), query)
    add("extra.accept_json", "/", LAB | {"stage": "softmax"}, headers={"Accept": "application/json"})
    add("extra.query_too_long", "/", {"tokens": "x" * 40_000})
    add("api.attention.duplicate_key", "/api/v1/attention", method="POST", headers={"Content-Type": "application/json"},
        content='{"tokens": ["a", "b"], "tokens": ["c"]}')  # fmt: skip
    add("api.attention.not_json", "/api/v1/attention", method="POST", headers={"Content-Type": "application/json"},
        content="{tokens")  # fmt: skip
    add("api.attention.sink", "/api/v1/attention/sink", LAB)
    pages("new", NEW_PAGES)  # last: /architectures loads the pretrained models, which /api/v1/models reports
    return out


# -- what an answer shows ----------------------------------------------------------------------------------------

NUMBER = re.compile(r"[-−+]?(?:\d+(?:[.,]\d+)*|[.]\d+)(?:[eE][-−+]?\d+)?%?")
SKIP_TAGS = {"script", "style", "template", "noscript"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}


def norm_url(url: str | None) -> str | None:
    """A link or form target with its query's keys sorted (values kept, in order within a key)."""
    if url is None:
        return None
    parts = urlsplit(url)
    query = urlencode(sorted(parse_qsl(parts.query, keep_blank_values=True), key=lambda kv: kv[0]))
    out = parts.path + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")
    return f"{parts.scheme}://{parts.netloc}{out}" if parts.netloc else out


class Page(HTMLParser):
    """Text of the main content (numbers), links, forms, errors and the title of an HTML answer."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool, bool]] = []  # (tag, in main, in an error)
        self.skip = 0
        self.has_main = False
        self.main_text: list[str] = []
        self.all_text: list[str] = []
        self.links: list[str] = []
        self.forms: list[dict[str, Any]] = []
        self.errors: list[list[str]] = []
        self.title: list[str] = []
        self.drawn: list[list[str]] = []  # an SVG's <title> (the QR code's address), not the page's numbers
        self.lang: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        in_main = bool(self.stack and self.stack[-1][1])
        in_error = bool(self.stack and self.stack[-1][2])
        if tag == "html":
            self.lang = a.get("lang")
        if tag == "main":
            self.has_main, in_main = True, True
        classes = (a.get("class") or "").split()
        if a.get("role") == "alert" or "error" in classes or "errors" in classes:
            in_error = True
            self.errors.append([])
        if tag == "a" and a.get("href"):
            self.links.append(norm_url(a["href"]) or "")
        if tag == "form":
            self.forms.append({"action": norm_url(a.get("action")), "method": (a.get("method") or "get").lower(),
                               "hx": {k: norm_url(v) for k, v in a.items() if k in ("hx-get", "hx-post")},
                               "fields": []})  # fmt: skip
        if tag in ("input", "select", "textarea", "button") and self.forms and a.get("name"):
            value = a.get("value") if tag != "textarea" else None
            self.forms[-1]["fields"].append([a["name"], a.get("type") or tag, value])
        for key in ("hx-get", "hx-post") if tag != "form" else ():
            if a.get(key):
                self.links.append(f"{key}:{norm_url(a[key])}")
        if tag == "title" and any(t == "svg" for t, _, _ in self.stack):
            self.drawn.append([])
        if tag in SKIP_TAGS:
            self.skip += 1
        if tag not in VOID:
            self.stack.append((tag, in_main, in_error))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        while self.stack:
            top = self.stack.pop()[0]
            if top in SKIP_TAGS:
                self.skip -= 1
            if top == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.stack and self.stack[-1][0] == "title":
            if any(tag == "svg" for tag, _, _ in self.stack):
                self.drawn[-1].append(data) if self.drawn else None
            else:
                self.title.append(data)
            return
        self.all_text.append(data)
        if self.stack and self.stack[-1][1]:
            self.main_text.append(data)
        if self.stack and self.stack[-1][2] and self.errors:
            self.errors[-1].append(data)


def shown(html: str) -> dict[str, Any]:
    p = Page()
    p.feed(html)
    p.close()
    text = " ".join(p.main_text if p.has_main else p.all_text)
    return {
        "lang": p.lang,
        "title": " ".join("".join(p.title).split()),
        "main": p.has_main,
        "numbers": NUMBER.findall(text),
        "links": p.links,
        "forms": p.forms,
        "errors": [" ".join(" ".join(e).split()) for e in p.errors if " ".join(e).strip()],
        "drawn": [" ".join("".join(d).split()) for d in p.drawn],
    }


# -- per-run secrets -----------------------------------------------------------------------------------------------


class Masks:
    """Room codes and tokens of this run, replaced by placeholders wherever they appear."""

    def __init__(self) -> None:
        self.words: dict[str, str] = {}

    def add(self, word: str | None, name: str) -> None:
        if word:
            self.words[word] = "{" + name + "}"

    def text(self, s: str) -> str:
        for word, name in sorted(self.words.items(), key=lambda kv: -len(kv[0])):
            s = s.replace(word, name)
        return s

    def doc(self, d: Any) -> Any:
        return json.loads(self.text(json.dumps(d, ensure_ascii=False)))


def record(resp: httpx.Response, masks: Masks, started: float) -> dict[str, Any]:
    kind = resp.headers.get("content-type", "").split(";")[0].strip()
    out: dict[str, Any] = {
        "request": f"{resp.request.method} {norm_url(str(resp.request.url.raw_path, 'ascii'))}",
        "status": resp.status_code,
        "content_type": kind,
        "location": norm_url(resp.headers.get("location")),
        "hx": {k: v for k, v in resp.headers.items() if k.lower().startswith("hx-")},
        "seconds": round(time.monotonic() - started, 3),
    }
    if kind == "application/json" or kind.endswith("+json"):
        try:
            out["json"] = resp.json()
        except ValueError:
            out["text"] = resp.text[:2000]
    elif kind == "text/html":
        out["html"] = shown(masks.text(resp.text))  # a room's code is no number of the page
    elif kind.startswith("text/"):
        out["text"] = resp.text[:4000]
    else:
        out["bytes"] = len(resp.content)
    return masks.doc(out)


def first_state(client: httpx.Client, url: str, masks: Masks, timeout: float = 20) -> dict[str, Any]:
    """The first `event: state` of a room's stream (what a follower is told on connecting)."""
    out: dict[str, Any] = {"events": []}
    started = time.monotonic()
    with client.stream("GET", url, timeout=timeout) as resp:
        out["status"] = resp.status_code
        out["content_type"] = resp.headers.get("content-type", "").split(";")[0]
        name, data = None, []
        for line in resp.iter_lines():
            if time.monotonic() - started > timeout:
                break
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif line == "" and name:
                try:
                    parsed: Any = json.loads("\n".join(data))
                except ValueError:
                    parsed = "\n".join(data)[:500]
                out["events"].append({"event": name, "data": parsed})
                if name == "state":
                    break
                name, data = None, []
    return masks.doc(out)


def room_walk(base: str, write: Any, masks: Masks) -> None:
    """A class: the teacher starts a room from the lab's form and another by the API; a student joins with the
    code, follows, and sees the teacher's next step."""
    origin = {"Origin": base}
    teacher = httpx.Client(base_url=base, timeout=120, headers=origin)
    api_teacher = httpx.Client(base_url=base, timeout=120, headers=origin)
    student = httpx.Client(base_url=base, timeout=120)
    query = urlencode(LAB | {"stage": "scores"})

    def go(name: str, client: httpx.Client, method: str, url: str, **kw: Any) -> httpx.Response:
        started = time.monotonic()
        resp = client.request(method, url, **kw)
        write(name, record(resp, masks, started))
        return resp

    # The page's "Start a class" form.
    resp = go("room.form_start", teacher, "POST", "/r", data={"page": "/", "query": query, "lang": "en"})
    location = resp.headers.get("location", "")
    code = teacher.cookies.get("lab_room")  # the room's cookie; its teacher token is in lab_teacher (HttpOnly)
    masks.add(code, "code")
    masks.add(teacher.cookies.get("lab_teacher"), "teacher_cookie")
    write("room.form_start", record(resp, masks, time.monotonic()) | {"cookies": sorted(teacher.cookies.keys())})
    if location:
        go("room.form_landing", teacher, "GET", location)
    # The API.
    resp = go("room.api_create", api_teacher, "POST", "/api/v1/rooms", json={"page": "/", "query": query})
    body = resp.json() if resp.status_code == 201 else {}
    api_code, token = body.get("code"), body.get("teacher_token")
    masks.add(api_code, "api_code")
    masks.add(token, "token")
    write("room.api_create", record(resp, masks, time.monotonic()))  # again, now masked
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for label, c in (("form", code), ("api", api_code)):
        if not c:
            continue
        go(f"room.{label}.student_join_code", student, "GET", "/r", params={"code": c.lower(), "lang": "en"})
        resp = go(f"room.{label}.student_follow", student, "GET", f"/r/{c}")
        if resp.headers.get("location"):
            go(f"room.{label}.student_view", student, "GET", resp.headers["location"].split("#")[0])
        go(f"room.{label}.student_bar", student, "GET", f"/r/{c}/bar", params={"lang": "en"})
        go(f"room.{label}.student_bar_zh", student, "GET", f"/r/{c}/bar", params={"lang": "zh"})
        go(f"room.{label}.info", student, "GET", f"/api/v1/rooms/{c}")
        write(f"room.{label}.events_before", first_state(student, f"/api/v1/rooms/{c}/events", masks))
    if api_code:
        c = api_code
        nxt = urlencode(LAB | {"stage": "softmax"})
        go("room.api.advance", api_teacher, "PUT", f"/api/v1/rooms/{c}/state", headers=auth,
           json={"page": "/", "query": nxt})  # fmt: skip
        go("room.api.advance_again_same", api_teacher, "PUT", f"/api/v1/rooms/{c}/state", headers=auth,
           json={"page": "/", "query": nxt})  # fmt: skip
        go("room.api.advance_refused", api_teacher, "PUT", f"/api/v1/rooms/{c}/state", headers=auth,
           json={"page": "/", "query": urlencode(LAB | {"stage": "bogus"})})  # fmt: skip
        go("room.api.advance_no_token", student, "PUT", f"/api/v1/rooms/{c}/state",
           json={"page": "/", "query": nxt})  # fmt: skip
        go("room.api.info_after", student, "GET", f"/api/v1/rooms/{c}")
        write("room.api.events_after", first_state(student, f"/api/v1/rooms/{c}/events", masks))
        resp = go("room.api.student_follow_after", student, "GET", f"/r/{c}")
        if resp.headers.get("location"):
            go("room.api.student_view_after", student, "GET", resp.headers["location"].split("#")[0])
        go("room.api.student_view_after_htmx", student, "GET", "/?" + nxt, headers={"HX-Request": "true"})
        go("room.api.advance_block", api_teacher, "PUT", f"/api/v1/rooms/{c}/state", headers=auth,
           json={"page": "/block", "query": ""})  # fmt: skip
        go("room.api.info_block", student, "GET", f"/api/v1/rooms/{c}")
        resp = go("room.api.student_follow_block", student, "GET", f"/r/{c}")
        go("room.api.bad_code", student, "GET", "/r/ZZZZZZ")
        go("room.api.bad_code_api", student, "GET", "/api/v1/rooms/ZZZZZZ")
        go("room.api.end", api_teacher, "DELETE", f"/api/v1/rooms/{c}", headers={"Authorization": f"Bearer {token}"})
        go("room.api.info_ended", student, "GET", f"/api/v1/rooms/{c}")
    for client in (teacher, api_teacher, student):
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the lab's address, e.g. http://127.0.0.1:8101 (loopback only)")
    parser.add_argument("out", type=Path, help="a folder for one JSON file per request")
    parser.add_argument("--only", help="a regex: crawl the requests whose name matches")
    args = parser.parse_args(argv)
    host = urlsplit(args.base).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        parser.error("loopback only")
    args.out.mkdir(parents=True, exist_ok=True)
    masks = Masks()
    masks.add(args.base.rstrip("/"), "base")  # absolute links to the server itself

    def write(name: str, doc: dict[str, Any]) -> None:
        (args.out / f"{name}.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1, sort_keys=True))

    with httpx.Client(base_url=args.base, timeout=300, follow_redirects=False) as client:
        for _ in range(240):  # a server still starting: wait for it (its pretrained models load in seconds)
            try:
                if client.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        for req in requests():
            if args.only and not re.search(args.only, req["name"]):
                continue
            started = time.monotonic()
            try:
                resp = client.request(req["method"], req["path"], params=req["query"], headers=req.get("headers"),
                                      json=req.get("json"), content=req.get("content"))  # fmt: skip
                doc = record(resp, masks, started)
            except httpx.HTTPError as exc:
                doc = {"error": f"{type(exc).__name__}: {exc}"}
            doc["name"] = req["name"]
            write(req["name"], doc)
            print(f"{req['name']:<40} {doc.get('status')} {doc.get('seconds')}", flush=True)
    if not args.only or re.search(args.only, "room."):
        room_walk(args.base, write, masks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
