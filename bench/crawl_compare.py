"""Compare two crawls of bench/crawl.py (before and after #43's web-layer refactor).

    python bench/crawl_compare.py /work/crawl-out/old /work/crawl-out/new [--json report.json]

For every request crawled in both: the status, the content type and a redirect's target must be equal; for HTML, the
numbers of the main content (in order; equal as displayed or within 1e-6 as numbers), the links' and forms' targets
(query keys sorted), the error messages, the title and the language; for JSON answers of the API and the rooms, the
documents (numbers within 1e-6). A page's `.json` twin is a View whose shape the refactor changed: its numbers (every
number in the document, in order of its key paths) are compared, and its key paths added and removed are listed.
Requests only the second crawl answers with a page (new pages) are counted apart.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

TOL = 1e-6
RUNTIME = {"cached_traces", "drawing_ahead"}  # /healthz's counts of this server's own history, not the page's
# Links the new tree draws to features added since ca65571 (not part of the refactor): counted, not compared.
NEW_LINKS = re.compile(
    r"^(hx-get:)?(/architectures|/attribution|/cost|/cross|/generate/samples"  # new pages in the menu
    r"|/api/v1/(cite|code|figure|notebook)"  # the export row (cite, show code, figure, notebook)
    r"|/lessons/(big-weight|same-prompt|translator-reads)"  # new lessons
    r"|#controls)(\?|$|#)"  # the skip link to the controls
)


# Differences traced to a change of main since ca65571 that is not the refactor's (a feature or a fix), each by the
# requests it touches and the lines of the comparison it explains: (requests, lines, cause).
EN_TOY = r"^(page\.(lab|block|decode|tiles|demos)\.(en|en\.present|htmx|json)|extra\.demos_bad_perm\.en)$"
EXPLAINED: list[tuple[str, str, str]] = [
    (
        EN_TOY,
        r"^(numbers|links|forms|drawn|twin numbers|twin values)",
        "6b40d7b, 65ddd14: the toy's and /demos' default sentence is the page's language's (en: 'cat sat on the mat'), "
        "pinned in the page's address (64cdb8e); the same pages given the sentence (*_q) agree",
    ),
    (r"^page\.lab\.zh\.present$", r"^drawn", "64cdb8e: the QR code's address names the toy's sentence"),
    (
        r".",
        r"^links insert .*\['/lessons/five-stages\?lang=\w+(&present=1)?'\]$",
        "6b40d7b: the lab's 'Start here' link to the first lesson",
    ),
    (
        r"^(api\.lessons_five-stages|page\.lesson(_step)?\.|extra\.lab_lesson.*\.json|bad\.lesson_step)",
        r"^(steps|lesson\.look|twin values at (steps|lesson\.look)|numbers insert at 0/0: \[\] -> \['1'\])",
        "05bb6f2: the first lesson's steps reworded (a step asks before it tells)",
    ),
    (
        r"^(api\.lessons|page\.lessons\.)",
        r"^(lessons: length|numbers insert .*\['10', '7', '6'\]|twin (numbers|values) at lessons)",
        "fe4cb73, dc76741, 19a54da: three new lessons",
    ),
    (
        r"^(page\.demos|extra\.demos)",
        r"^numbers (insert|delete) .*'0', '0\.(2|5)'",
        "1035987: the line charts' axes numbered anew (ticks to the axis' end)",
    ),
    (r"^page\.heads\.", r"^numbers insert", "5f5c65e, 4cc361a: /heads' probe charts drawn with numbered axes"),
    (
        r"^(page|extra)\.generate",
        r"^(numbers insert .*\['0'\]|links insert .*hx-get:/generate|forms replace)",
        "af316d5: /generate's sampling fields (temperature, top-k (0: off), ...)",
    ),
    (r"^cell\.", r"^numbers the same, in another order", "95975e2: the open cell's arithmetic under the matrices"),
    (
        r"^extra\.lab_color\.",
        r".",
        "32c0631: a colour mode the lab does not have is refused on every view (422 "
        "naming color), as ca65571 did only for large views; it ignored it on small ones",
    ),
    (
        r"\.zh$",
        r"^errors replace",
        "32c0631: errors coded and translated from the catalogue (ca65571 left these in English on the Chinese page)",
    ),
    (
        r"^room\.api\.(info_block|student_follow_block)$",
        r"^(query|location)",
        "64cdb8e: a class keeps its sentence when the teacher opens another toy page",
    ),
]


def explained(name: str, diffs: list[str]) -> list[str]:
    """The causes of a request's differences, when every line has one (else [])."""
    causes = []
    for line in diffs:
        cause = next((c for n, pat, c in EXPLAINED if re.search(n, name) and re.search(pat, line)), None)
        if cause is None:
            return []
        causes.append(cause)
    return list(dict.fromkeys(causes))


def as_number(s: str) -> float | None:
    t = s.replace("−", "-").replace(",", "").rstrip("%")
    try:
        return float(t)
    except ValueError:
        return None


def same_number(a: Any, b: Any) -> bool:
    if a == b:
        return True
    x = as_number(a) if isinstance(a, str) else a
    y = as_number(b) if isinstance(b, str) else b
    if isinstance(x, bool) or isinstance(y, bool) or not isinstance(x, int | float) or not isinstance(y, int | float):
        return False
    return math.isclose(x, y, rel_tol=TOL, abs_tol=TOL)


def list_diff(a: list[Any], b: list[Any], same: Any = None) -> list[str]:
    """The changed runs of two sequences, as text ("-3 +4 at 12: …")."""
    if same is None and a == b:
        return []
    if same is not None and len(a) == len(b) and all(map(same, a, b)):
        return []
    out = []
    key = (lambda x: x) if same is None else (lambda x: x if not isinstance(x, str) else x.replace("−", "-"))
    sm = difflib.SequenceMatcher(a=[key(x) for x in a], b=[key(x) for x in b], autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        if op == "replace" and same is not None and i2 - i1 == j2 - j1 and all(map(same, a[i1:i2], b[j1:j2])):
            continue
        out.append(f"{op} at {i1}/{j1}: {a[i1:i2][:12]} -> {b[j1:j2][:12]}")
    return out


def leaves(doc: Any, path: str = "") -> list[tuple[str, Any]]:
    """(key path, value) of every leaf; list indices as [] (a shape, not a position)."""
    if isinstance(doc, dict):
        return [kv for k in sorted(doc) for kv in leaves(doc[k], f"{path}.{k}" if path else k)]
    if isinstance(doc, list):
        return [kv for x in doc for kv in leaves(x, f"{path}[]")] or [(f"{path}[]", None)]
    return [(path, doc)]


def numbers_of(doc: Any) -> list[float]:
    return [v for _, v in leaves(doc) if isinstance(v, int | float) and not isinstance(v, bool)]


def json_diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Differences of two JSON documents, numbers within TOL."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            p = f"{path}.{k}" if path else k
            if k not in a:
                out.append(f"added {p}")
            elif k not in b:
                out.append(f"removed {p}")
            else:
                out += json_diff(a[k], b[k], p)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} -> {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in json_diff(x, y, f"{path}[{i}]")]
    if same_number(a, b) if not isinstance(a, str) else a == b:
        return []
    return [f"{path}: {json.dumps(a, ensure_ascii=False)[:120]} -> {json.dumps(b, ensure_ascii=False)[:120]}"]


def by_path(doc: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for p, v in leaves(doc):
        out.setdefault(p, []).append(v)
    return out


def twin_numbers(a: Any, b: Any) -> list[str]:
    """A reshaped twin's numbers: those at a key path both have must agree; those under a path the new one lost
    must reappear under a path it gained (a renamed key), as a multiset."""
    pa, pb = by_path(a), by_path(b)
    out = []
    for p in sorted(set(pa) & set(pb)):
        na = [v for v in pa[p] if isinstance(v, int | float) and not isinstance(v, bool)]
        nb = [v for v in pb[p] if isinstance(v, int | float) and not isinstance(v, bool)]
        out += [f"twin numbers at {p}: {d}" for d in list_diff(na, nb, same_number)]
        if not p.startswith("provenance."):
            ta = [v for v in pa[p] if not isinstance(v, int | float) or isinstance(v, bool)]
            tb = [v for v in pb[p] if not isinstance(v, int | float) or isinstance(v, bool)]
            out += [f"twin values at {p}: {d}" for d in list_diff(ta, tb)]
    lost = sorted(round(v, 5) for p in set(pa) - set(pb) for v in pa[p] if isinstance(v, float))
    gained = Counter(round(v, 5) for p in set(pb) - set(pa) for v in pb[p] if isinstance(v, float))
    missing = [v for v in lost if not gained.get(v)]
    if missing:
        out.append(f"twin numbers under removed keys not found under added keys: {len(missing)} {missing[:8]}")
    return out


def twin(name: str) -> bool:
    """A page's JSON face: its `.json` twin URL, or the page asked for with Accept: application/json."""
    return name == "extra.accept_json" or (name.endswith(".json") and not name.startswith(("api.", "room.")))


def compare(a: dict[str, Any], b: dict[str, Any], name: str) -> tuple[list[str], dict[str, Any] | None]:
    """(differences in numbers or behaviour, the twin's shape change)."""
    diffs: list[str] = []
    for key in ("status", "content_type", "location", "error", "hx"):
        if a.get(key) != b.get(key):
            diffs.append(f"{key}: {a.get(key)!r} -> {b.get(key)!r}")
    if "html" in a and "html" in b:
        ha, hb = a["html"], b["html"]
        for key in ("lang", "title"):
            if ha[key] != hb[key]:
                diffs.append(f"{key}: {ha[key]!r} -> {hb[key]!r}")
        for key in ("drawn",):
            if ha.get(key) != hb.get(key):
                diffs.append(f"{key}: {ha.get(key)!r} -> {hb.get(key)!r}")
        moved = list_diff(ha["numbers"], hb["numbers"], same_number)
        if moved and Counter(n.replace("−", "-") for n in ha["numbers"]) == Counter(
            n.replace("−", "-") for n in hb["numbers"]
        ):
            diffs.append(f"numbers the same, in another order ({len(moved)} runs moved)")
        else:
            diffs += [f"numbers {d}" for d in moved]
        la = sorted({x for x in ha["links"] if not NEW_LINKS.match(x)})
        lb = sorted({x for x in hb["links"] if not NEW_LINKS.match(x)})
        diffs += [f"links {d}" for d in list_diff(la, lb)]

        def form(f: dict[str, Any]) -> str:  # what a form sends: its fields in any order
            return json.dumps(f | {"fields": sorted(map(json.dumps, f["fields"]))}, sort_keys=True, ensure_ascii=False)

        fa, fb = sorted(map(form, ha["forms"])), sorted(map(form, hb["forms"]))
        diffs += [f"forms {d}" for d in list_diff(fa, fb)]
        diffs += [f"errors {d}" for d in list_diff(ha["errors"], hb["errors"])]
    shape = None
    if "json" in a and "json" in b:
        if twin(name) and a.get("status") == 200 == b.get("status"):
            pa = {p for p, _ in leaves(a["json"])}
            pb = {p for p, _ in leaves(b["json"])}
            shape = {"removed": sorted(pa - pb), "added": sorted(pb - pa)}
            if not shape["removed"] and not shape["added"]:
                diffs += json_diff(a["json"], b["json"])
                shape = None
            else:
                diffs += twin_numbers(a["json"], b["json"])
        elif (
            twin(name) and a.get("status") != 200 and b.get("status") != 200
        ):  # a refused twin: the error's fields (loc) are behaviour, its shape is listed
            la = sorted(json.dumps(d.get("loc")) for d in (a["json"].get("detail") or []) if isinstance(d, dict))
            lb = sorted(json.dumps(d.get("loc")) for d in (b["json"].get("detail") or []) if isinstance(d, dict))
            diffs += [f"error fields {d}" for d in list_diff(la, lb)]
            pa, pb = {p for p, _ in leaves(a["json"])}, {p for p, _ in leaves(b["json"])}
            if pa != pb:
                shape = {"removed": sorted(pa - pb), "added": sorted(pb - pa)}
        else:
            strip = (lambda d: {k: v for k, v in d.items() if k not in RUNTIME}) if name == "api._healthz" else None
            diffs += json_diff(*((strip(a["json"]), strip(b["json"])) if strip else (a["json"], b["json"])))
    elif ("json" in a) != ("json" in b):
        diffs.append("json face: " + ("lost" if "json" in a else "gained"))
    if "events" in a or "events" in b:
        diffs += json_diff(a.get("events"), b.get("events"), "events")
    if ("text" in a or "text" in b) and a.get("text") != b.get("text"):
        diffs.append("text differs")
    return diffs, shape


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--json", type=Path, help="write the whole report here")
    parser.add_argument("--quiet", action="store_true", help="counts and names only")
    args = parser.parse_args(argv)
    before = {p.stem: json.loads(p.read_text()) for p in args.before.glob("*.json")}
    after = {p.stem: json.loads(p.read_text()) for p in args.after.glob("*.json")}
    report: dict[str, Any] = {
        "same": [],
        "explained": {},
        "differ": {},
        "added": {},
        "shapes": {},
        "new": [],
        "only_before": [],
        "only_after": [],
    }
    for name in sorted(set(before) | set(after)):
        if name not in after:
            report["only_before"].append(name)
            continue
        if name not in before:
            report["only_after"].append(name)
            continue
        if name.startswith("new."):  # a page of the new tree only: the old one answers 404
            report["new"].append(f"{name}: {before[name].get('status')} -> {after[name].get('status')}")
            continue
        diffs, shape = compare(before[name], after[name], name)
        if shape:
            report["shapes"][name] = shape
        added = [d for d in diffs if d.startswith("added ")]  # a field the API answers in addition
        diffs = [d for d in diffs if not d.startswith("added ")]
        if added:
            report["added"][name] = added
        if diffs and (causes := explained(name, diffs)):
            report["explained"][name] = causes
        elif diffs:
            report["differ"][name] = diffs
        else:
            report["same"].append(name)
    compared = len(report["same"]) + len(report["explained"]) + len(report["differ"])
    kinds = Counter(n.split(".")[0] for n in [*report["same"], *report["explained"], *report["differ"]])
    print(f"compared {compared} requests ({dict(kinds)}): {len(report['same'])} the same in numbers and behaviour, "
          f"{len(report['explained'])} differ by a change named below, {len(report['differ'])} differ unexplained; "
          f"{len(report['shapes'])} JSON twins changed shape; "
          f"{len(report['new'])} requests of new pages; {len(report['added'])} answers with added fields")  # fmt: skip
    for name, added in report["added"].items():
        print(f"  added in {name}: {', '.join(a.removeprefix('added ') for a in added)}")
    by_cause = Counter(c for causes in report["explained"].values() for c in causes)
    print("\nexplained differences (requests, cause):")
    for cause, n in by_cause.most_common():
        print(f"  {n:3d}  {cause}")
    for name, diffs in report["differ"].items():
        print(f"\n{name}")
        for d in diffs[: 3 if args.quiet else 40]:
            print(f"  {d}")
    if not args.quiet:
        print("\nJSON twin shapes (key paths, [] a list's items):")
        for name, shape in report["shapes"].items():
            print(f"  {name}: -{len(shape['removed'])} +{len(shape['added'])}")
    if args.json:
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=1))
    return 1 if report["differ"] else 0


if __name__ == "__main__":
    sys.exit(main())
