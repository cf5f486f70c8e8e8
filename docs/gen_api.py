"""Write docs/api.md, the JSON API's reference, from the lab's own OpenAPI schema (`app.main.create_app().openapi()`).

    .venv/bin/python docs/gen_api.py           # rewrite docs/api.md
    .venv/bin/python docs/gen_api.py --check   # exit 1, saying so, when docs/api.md is not what the schema says

`make docs` runs it before mkdocs builds the site, and tests/app/test_docs.py runs `--check`, so the page cannot fall
behind the routes, their parameters, constraints and answers. The server's default settings are used (every
ATTENTION_LAB_* variable is ignored), so the page reads the same on every machine. Nothing here is written by hand
but the page's opening lines and the way a schema is put into words.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "api.md"
METHODS = ("get", "post", "put", "patch", "delete")

Schema = dict[str, Any]


def openapi() -> Schema:
    """The schema a freshly started server with default settings serves at /openapi.json."""
    for name in [n for n in os.environ if n.startswith("ATTENTION_LAB_")]:
        del os.environ[name]
    sys.path.insert(0, str(ROOT))
    from app.main import create_app
    from app.settings import Settings

    return create_app(Settings()).openapi()


def slug(text: str) -> str:
    """The anchor both GitHub and mkdocs give a heading made of ASCII words (tests/app/test_docs.py checks the pair)."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", text.lower()).strip())


def link(ref: str) -> str:
    name = ref.rsplit("/", 1)[-1]
    return f"[{name}](#{slug(name)})"


def prose(text: str | None) -> str:
    """One table cell or paragraph of a docstring: whitespace collapsed, `|` escaped, and outside code spans the
    characters Markdown would take for HTML or emphasis escaped."""
    if not text:
        return ""
    parts = " ".join(text.split()).split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;").replace("*", r"\*")
    return "`".join(parts).replace("|", r"\|")


def number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def code(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return "`" + text.replace("|", r"\|") + "`"


def constraints(s: Schema) -> list[str]:
    out = []
    for key, word in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<")):
        if key in s:
            out.append(f"{word} {number(s[key])}")
    if "multipleOf" in s:
        out.append(f"a multiple of {number(s['multipleOf'])}")
    if "minLength" in s or "maxLength" in s:
        lo, hi = s.get("minLength"), s.get("maxLength")
        out.append(f"{lo}–{hi} characters" if lo and hi is not None else f"≤ {hi} characters" if hi is not None else
                   f"≥ {lo} characters")  # fmt: skip
    if "pattern" in s:
        out.append(f"matching `{s['pattern']}`".replace("|", r"\|"))
    if "minItems" in s:
        out.append(f"≥ {s['minItems']} items")
    if "maxItems" in s:
        out.append(f"≤ {s['maxItems']} items")
    if s.get("uniqueItems"):
        out.append("unique items")
    if "enum" in s:
        out.append("one of " + ", ".join(code(v) for v in s["enum"]))
    return out


def kind(s: Schema) -> str:
    """A schema in words: its type, what it holds and its constraints (`integer ≥ 0 or null`)."""
    if "$ref" in s:
        return link(s["$ref"])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in s:
            join = " and " if key == "allOf" else " or "
            return join.join(dict.fromkeys(kind(branch) for branch in s[key]))
    if "const" in s:
        return code(s["const"])
    t = s.get("type")
    if isinstance(t, list):
        return " or ".join(kind({**s, "type": one}) for one in t)
    if t == "string" and s.get("maxLength") == 0:
        return "empty string"
    if t == "array":
        limits = constraints({k: v for k, v in s.items() if k in ("minItems", "maxItems", "uniqueItems")})
        base = "array" + (f" ({', '.join(limits)})" if limits else "")
        if "prefixItems" in s:
            return base + " [" + ", ".join(kind(item) for item in s["prefixItems"]) + "]"
        return base + (" of " + kind(s["items"]) if "items" in s else "")
    if t == "object" and isinstance(s.get("additionalProperties"), dict):
        return "object of " + kind(s["additionalProperties"])
    base = t or "any"
    if "format" in s:
        base += f" ({s['format']})"
    extra = constraints(s)
    if "enum" in s:
        return extra[-1] if len(extra) == 1 else base + ", " + ", ".join(extra)
    return base + (" " + ", ".join(extra) if extra else "")


def notes(s: Schema) -> str:
    """The field's description and the lab's own metadata (`x-lab`: which mask it goes with, which limit bounds it)."""
    said = [prose(s.get("description"))]
    lab = s.get("x-lab") or {}
    if lab.get("depends"):
        field, value = lab["depends"]
        said.append(f"Only with `{field}={value}`.")
    if lab.get("only"):
        said.append({"builtin": "Built-in presets only.", "pretrained": "Pretrained models only."}.get(
            lab["only"], f"Only for {lab['only']}."))  # fmt: skip
    if lab.get("limit"):
        said.append(f"At most the server's `{lab['limit'].upper()}`.")
    return " ".join(p for p in said if p)


def field_table(properties: Schema, required: list[str], first: str = "field") -> list[str]:
    rows = [f"| {first} | type | required | default | description |", "|---|---|---|---|---|"]
    for name, s in properties.items():
        default = code(s["default"]) if "default" in s else ""
        rows.append(f"| `{name}` | {kind(s)} | {'yes' if name in required else ''} | {default} | {notes(s)} |")
    return rows


def request_models(schema: Schema) -> dict[str, Schema]:
    """The components that some operation takes as its JSON body."""
    found = {}
    for operations in schema["paths"].values():
        for op in operations.values():
            for content in op.get("requestBody", {}).get("content", {}).values():
                for ref in re.findall(r'"\$ref": "([^"]+)"', json.dumps(content)):
                    name = ref.rsplit("/", 1)[-1]
                    found[name] = schema["components"]["schemas"][name]
    return found


def query_model(params: list[Schema], models: dict[str, Schema]) -> str | None:
    """The request model a GET twin spells as its query: the largest one whose every field is an optional query
    parameter of the operation (the POST body and the GET query are one model in this app)."""
    optional = {p["name"] for p in params if p["in"] == "query" and not p.get("required")}
    fits = [
        (len(m.get("properties", {})), name) for name, m in models.items() if set(m.get("properties", {})) <= optional
    ]
    fits = [f for f in fits if f[0] >= 3]
    return max(fits)[1] if fits else None


def named(op: Schema) -> bool:
    """Whether the route was given a summary: FastAPI makes one of the function's name when it was not."""
    summary = op.get("summary") or ""
    return bool(summary) and not op.get("operationId", "").startswith(summary.lower().replace(" ", "_"))


def gist(op: Schema) -> str:
    """The index's line: the route's own summary, else its description's first sentence."""
    if named(op) or not op.get("description"):
        return prose(op.get("summary"))
    first = re.split(r"(?<=\.)\s+(?=[A-Z])", " ".join(op["description"].split()), maxsplit=1)[0]
    return prose(first if len(first) <= 160 else first[:160].rsplit(" ", 1)[0] + " …")


def operation(method: str, path: str, op: Schema, models: dict[str, Schema]) -> list[str]:
    out = [f"### {method.upper()} {path}", ""]
    if named(op):
        out += [f"**{prose(op['summary'])}**", ""]
    if op.get("description"):
        out += [prose(op["description"]), ""]
    if op.get("security"):
        out += ["Authorization: " + ", ".join(name for req in op["security"] for name in req) + ".", ""]
    params = op.get("parameters", [])
    model = query_model(params, models) if method == "get" else None
    shared = set(models[model].get("properties", {})) if model else set()
    if model:
        out += [
            f"Query: every field of {link(model)}, in the GET spelling (a list comma-separated or repeated, a matrix "
            "as JSON text; an empty value is the field left out)" + (", and:" if len(params) > len(shared) else "."),
            "",
        ]
    rest = [p for p in params if p["name"] not in shared]
    if rest:
        out.append("| parameter | in | type | required | default | description |")
        out.append("|---|---|---|---|---|---|")
        for p in rest:
            s = p.get("schema", {})
            default = code(s["default"]) if "default" in s else ""
            described = prose(p.get("description") or s.get("description"))
            required = "yes" if p.get("required") else ""
            out.append(f"| `{p['name']}` | {p['in']} | {kind(s)} | {required} | {default} | {described} |")
        out.append("")
    body = op.get("requestBody")
    if body:
        for media, content in body.get("content", {}).items():
            need = "required" if body.get("required") else "optional"
            out += [f"Body ({need}, `{media}`): {kind(content.get('schema', {}))}.", ""]
    out += ["| status | meaning | answer |", "|---|---|---|"]
    for status, answer in sorted(op.get("responses", {}).items()):
        contents = [
            f"`{media}`" + (f" {kind(c['schema'])}" if c.get("schema") else "")
            for media, c in answer.get("content", {}).items()
        ]
        headers = [f"`{h}` header" for h in answer.get("headers", {})]
        out.append(f"| {status} | {prose(answer.get('description'))} | {'; '.join([*contents, *headers])} |")
    return [*out, ""]


def render(schema: Schema) -> str:
    info = schema["info"]
    models = request_models(schema)
    by_tag: dict[str, list[tuple[str, str, Schema]]] = {}
    for path, operations in schema["paths"].items():
        for method in METHODS:
            if method in operations:
                op = operations[method]
                by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((method, path, op))
    out = [
        "# API reference",
        "",
        "<!-- Generated by docs/gen_api.py from the app's OpenAPI schema: edit the routes, not this page. -->",
        "",
        f"{info['title']} {info['version']}: {prose(info.get('summary'))} Every operation the server offers, with its",
        "parameters, their constraints and its answers, as the running server describes them at `/openapi.json`",
        "(and interactively at `/docs`), with the default settings: a limit you change with a setting",
        "([Settings](settings.md)) changes the numbers here. [Using the API](api-guide.md) says how the pieces fit.",
        "",
        "## Operations",
        "",
        "| operation | what it does |",
        "|---|---|",
    ]
    for ops in by_tag.values():
        for method, path, op in ops:
            heading = f"{method.upper()} {path}"
            out.append(f"| [{heading}](#{slug(heading)}) | {gist(op)} |")
    out.append("")
    for tag, ops in by_tag.items():
        first, _, rest = tag.partition(" ")
        out += [f"## {first.upper() if len(first) <= 2 else first.capitalize()} {rest}".rstrip(), ""]
        for method, path, op in ops:
            out += operation(method, path, op, models)
    out += [
        "## Schemas",
        "",
        "The request models (a JSON body, or the same fields as a GET query), the answers, and each page's JSON face",
        "(`<Kind>View`: what `GET /<page>.json` or `Accept: application/json` returns).",
        "",
    ]
    for name, s in schema["components"]["schemas"].items():
        out += [f"### {name}", ""]
        if s.get("description"):
            out += [prose(s["description"]), ""]
        if s.get("properties"):
            out += [*field_table(s["properties"], s.get("required", [])), ""]
            if s.get("additionalProperties") is False:
                out += ["Any other field is refused (422).", ""]
        elif "properties" not in s:
            out += [f"Type: {kind(s)}.", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/api.md instead of writing it")
    parser.add_argument("--schema", type=Path, help="render a saved /openapi.json instead of the app's own")
    args = parser.parse_args(argv)
    page = render(json.loads(args.schema.read_text(encoding="utf-8")) if args.schema else openapi())
    if args.check:
        if PAGE.is_file() and PAGE.read_text(encoding="utf-8") == page:
            return 0
        print(f"{PAGE.relative_to(ROOT)} is not what the OpenAPI schema says: run `make docs` (or "
              "`.venv/bin/python docs/gen_api.py`) and commit it", file=sys.stderr)  # fmt: skip
        return 1
    PAGE.write_text(page, encoding="utf-8")
    print(PAGE.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
