"""The docs work: every link in README.md and docs/*.md resolves, every command they tell a user to run exists.

Links: a relative link names a file that exists (from docs/, one inside docs/, since the site is built from there
alone), and an #anchor names a heading of that page under both GitHub's and mkdocs' way of making anchors. Commands,
in shell code blocks and in inline code: `make` targets are the Makefile's, `attention-lab` subcommands and options
are the CLI's own parser's (a whole command in a code block must parse), `python -m` modules exist (and a module of
this repository takes the options shown), script and test paths exist. Beside them: the settings table is the
server's settings, the system packages are the ones CI installs, every page is in the site's nav, repository paths
named in code exist, and docs/api.md is what the OpenAPI schema says (docs/gen_api.py --check).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from app.cli import _parser
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
SHELL_FENCES = {"", "sh", "bash", "shell", "console", "zsh"}
PROGRAM = re.compile(
    r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(make|(?:\S*/)?attention-lab|(?:\S*/)?python3?|(?:\S*/)?pytest)(?=\s|$)"
)


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int
    text: str
    fenced: bool  # a line of a shell code block (a whole command), not inline code in prose

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


@cache
def scan(page: Path) -> tuple[list[tuple[int, str]], list[Snippet], list[Snippet], list[tuple[int, str]]]:
    """A page's prose lines with code spans removed, its shell code lines, its inline code spans, its headings."""
    prose, shell, inline, headings = [], [], [], []
    fence: str | None = None
    lang = ""
    previous = ""
    pending = ""
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        opening = re.match(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)", line)
        if fence is None and opening:
            fence, lang = opening.group(1), opening.group(2).lower()
            previous = ""
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            elif lang in SHELL_FENCES:
                text = pending + line.strip()
                if text.endswith("\\"):
                    pending = text[:-1] + " "
                else:
                    pending = ""
                    shell.append(Snippet(page, number, re.sub(r"^\$\s+", "", text), True))
            continue
        spans = re.findall(r"(`+)(.+?)\1", line)
        inline += [Snippet(page, number, span.strip(), False) for _, span in spans]
        plain = re.sub(r"(`+)(.+?)\1", lambda m: "x" * len(m.group(0)), line)
        prose.append((number, plain))
        atx = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if atx:
            headings.append((number, atx.group(2)))
        elif re.match(r"^(=+|-+)\s*$", line) and previous.strip() and not re.match(r"^\s*([-*+|>]|\d+\.)", previous):
            headings.append((number - 1, previous.strip()))
        previous = line
    return prose, shell, inline, headings


def heading_text(markdown: str) -> str:
    """What a heading reads as: links by their text, code by its content, emphasis markers gone."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    return re.sub(r"[`*]", "", text)


def github_slug(text: str) -> str:
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def mkdocs_slug(text: str) -> str:
    """Python-Markdown's toc.slugify, which mkdocs uses."""
    value = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", value).strip().lower())


@cache
def anchors(page: Path) -> set[str]:
    """The anchors a link may name: those both renderers give a heading (the first of a repeated name)."""
    found = set()
    for _, heading in scan(page)[3]:
        text = heading_text(heading)
        if github_slug(text) == mkdocs_slug(text):
            found.add(github_slug(text))
    return found


def links(page: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in scan(page)[0]:
        for target in re.findall(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)", line):
            found.append((number, target))
        found += [(number, t) for t in re.findall(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", line)]
        found += [(number, t) for t in re.findall(r"(?:href|src)=\"([^\"]*)\"", line)]
    return found


def broken_link(page: Path, target: str, root: Path = ROOT) -> str | None:
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
        return None  # http:, https:, mailto: — not ours to check offline
    if target.startswith("/"):
        return "an absolute path: link relative to the page"
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.exists():
        return f"{path} does not exist"
    if page.parent == root / "docs" and root / "docs" not in dest.parents:
        return "leaves docs/: the site is built from docs/ alone"
    if root not in dest.parents:
        return "leaves the repository"
    if anchor:
        if dest.suffix != ".md":
            return f"#{anchor} on a file that is not Markdown"
        if anchor not in anchors(dest):
            return f"no heading of {dest.relative_to(root)} has the anchor #{anchor} (on GitHub and in mkdocs alike)"
    return None


def test_every_internal_link_resolves() -> None:
    broken = [
        f"{page.relative_to(ROOT)}:{number}: ({target}) {why}"
        for page in PAGES
        for number, target in links(page)
        if (why := broken_link(page, target))
    ]
    assert not broken, "\n".join(broken)


def test_the_link_checker_sees_links_and_anchors(tmp_path: Path) -> None:
    """The checker itself: a link and an anchor that exist pass, a missing file and a missing heading fail, and a
    heading GitHub and mkdocs would anchor differently cannot be linked to."""
    page = tmp_path / "a.md"
    page.write_text("# A page\n\n## The `serve` command\n\n## Colours & scales\n\n```sh\n# not a heading\n```\n")
    assert anchors(page) == {"a-page", "the-serve-command"}
    assert broken_link(page, "a.md#the-serve-command", tmp_path) is None
    assert broken_link(page, "#a-page", tmp_path) is None
    assert "does not exist" in (broken_link(page, "b.md", tmp_path) or "")
    assert "anchor" in (broken_link(page, "#colours-scales", tmp_path) or "")
    assert "anchor" in (broken_link(page, "#not-a-heading", tmp_path) or "")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.md"  # a file that exists, beside the repository
    outside.write_text("# Elsewhere\n")
    assert "leaves the repository" in (broken_link(page, f"../{outside.name}", tmp_path) or "")
    assert "absolute" in (broken_link(page, "/docs", tmp_path) or "")
    assert broken_link(page, "https://example.org/x", tmp_path) is None


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set()
    for line in text.splitlines():
        rule = re.match(r"^([^\s#:=][^:=]*?)\s*::?(?!=)", line)
        if rule and not line.startswith("\t"):
            targets |= {t for t in rule.group(1).split() if "$" not in t and "%" not in t}
    return targets


def commands() -> list[Snippet]:
    """Every command the docs ask a user to run: shell code lines and inline code, split at && ; | and ||."""
    found = []
    for page in PAGES:
        _, shell, inline, _ = scan(page)
        for snippet in [*shell, *inline]:
            for part in re.split(r"\s(?:&&|\|\||;|\|)\s", snippet.text):
                part = part.strip()
                if PROGRAM.match(part):
                    found.append(Snippet(snippet.page, snippet.line, part, snippet.fenced))
    return found


def words(snippet: Snippet) -> list[str]:
    text = re.sub(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*", "", snippet.text)
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return text.split()


def command_problem(snippet: Snippet, targets: set[str]) -> str | None:
    argv = words(snippet)
    program = Path(argv[0]).name
    if program == "make":
        unknown = [w for w in argv[1:] if not w.startswith("-") and "=" not in w and w not in targets]
        return f"no Makefile target {', '.join(unknown)}" if unknown else None
    if program == "attention-lab":
        return cli_problem(argv[1:], snippet.fenced)
    if program == "pytest":
        missing = [w for w in argv[1:] if not w.startswith("-") and not (ROOT / w.split("::")[0]).exists()]
        return f"no test path {', '.join(missing)}" if missing else None
    if program.startswith("python"):
        if "-m" not in argv:
            scripts = [w for w in argv[1:] if w.endswith(".py")]
            missing = [s for s in scripts[:1] if not (ROOT / s).is_file()]
            return f"no script {missing[0]}" if missing else None
        if argv.index("-m") + 1 == len(argv):
            return "python -m without a module" if snippet.fenced else None  # inline, a mention of the switch
        module = argv[argv.index("-m") + 1]
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            return f"no module {module}"
        origin = Path(spec.origin)
        if ROOT in origin.parents:
            source = origin.read_text(encoding="utf-8")
            flags = {f for w in argv[argv.index("-m") + 2 :] for f in re.findall(r"--[a-z][a-z0-9-]*", w)}
            unknown = sorted(f for f in flags if f'"{f}"' not in source)
            return f"{module} takes no {', '.join(unknown)}" if unknown else None
    return None


def cli_problem(args: list[str], whole: bool) -> str | None:
    """A whole command must parse as the CLI parses it; inline code may be a fragment (`attention-lab trace`), so
    there only the subcommand and the option names are checked."""
    parser = _parser()
    if whole:
        try:
            parser.parse_args(args)
        except SystemExit as stop:
            return None if stop.code == 0 else f"attention-lab rejects it (exit {stop.code})"
        return None
    sub: dict[str, argparse.ArgumentParser] = next(a for a in parser._actions if a.dest == "command").choices  # type: ignore[assignment]
    if not args:
        return None
    if args[0] not in sub:
        return f"no subcommand {args[0]}"
    known = {s for a in sub[args[0]]._actions for s in a.option_strings}
    unknown = [a.split("=")[0] for a in args[1:] if a.startswith("-") and a.split("=")[0] not in known]
    return f"attention-lab {args[0]} has no {', '.join(unknown)}" if unknown else None


def test_every_command_exists() -> None:
    targets = makefile_targets()
    found = commands()
    assert any(s.text.startswith("make run") for s in found) and any(s.fenced for s in found)
    wrong = [f"{s.where()}: `{s.text}`: {why}" for s in found if (why := command_problem(s, targets))]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("text", "fenced", "wrong"),
    [
        ("make run", True, False),
        ("make docs HOST=0.0.0.0", True, False),
        ("make deploy", True, True),
        ("attention-lab serve --host 0.0.0.0 --workers 2", True, False),
        ("attention-lab serve --wrokers 2", True, True),
        ("attention-lab model-view", True, True),  # a whole command lacks its text
        ("attention-lab model-view", False, False),  # inline, a mention of the subcommand
        ("attention-lab teach", False, True),
        ("python -m bench.attention --sizes 128 --json", True, False),
        ("python -m bench.attention --size 128", True, True),
        ("python -m bench.nothing", True, True),
        (".venv/bin/python docs/gen_api.py --check", True, False),
        (".venv/bin/pytest tests/test_nothing.py -x", True, True),
    ],
)
def test_the_command_checker_catches_what_does_not_exist(text: str, fenced: bool, wrong: bool) -> None:
    snippet = Snippet(ROOT / "README.md", 1, text, fenced)
    assert (command_problem(snippet, makefile_targets()) is not None) == wrong


def test_the_system_packages_are_the_ones_ci_installs() -> None:
    """README and the install page name in one apt-get line every package .ci/run installs."""
    ci = set(re.findall(r"need\+=\(([\w.+-]+)\)", (ROOT / ".ci" / "run").read_text(encoding="utf-8")))
    assert ci, "no packages found in .ci/run"
    for page in (ROOT / "README.md", DOCS / "install.md"):
        named = {w for s in scan(page)[1] if "apt-get install" in s.text for w in words(s) if not w.startswith("-")}
        assert ci <= named, f"{page.relative_to(ROOT)} does not ask for {sorted(ci - named)} (.ci/run installs them)"


def test_the_settings_page_is_the_servers_settings() -> None:
    """docs/settings.md has a row for every setting, under its own name, with the default the server uses."""
    rows = re.findall(
        r"^\| `([A-Z0-9_]+)` \| (`[^`]*`|unset) \|", (DOCS / "settings.md").read_text(encoding="utf-8"), re.M
    )
    fields = Settings.model_fields
    wrong = []
    for name, shown in rows:
        field = fields.get(name.lower())
        if field is None:
            wrong.append(f"{name}: no such setting")
            continue
        default = field.default
        if shown == "unset":
            ok = default is None
        elif isinstance(default, bool):
            ok = shown.strip("`") == str(default).lower()
        elif isinstance(default, int | float):
            ok = float(shown.strip("`")) == float(default)
        else:
            ok = shown.strip("`") == str(default)
        if not ok:
            wrong.append(f"{name}: the page says {shown}, the server's default is {default!r}")
    missing = sorted(set(fields) - {name.lower() for name, _ in rows})
    wrong += [f"ATTENTION_LAB_{name.upper()}: not on docs/settings.md" for name in missing]
    assert not wrong, "\n".join(wrong)


def test_every_page_is_in_the_sites_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config[config.index("\nnav:") :]
    listed = set(re.findall(r":\s*([\w./-]+\.md)\s*$", nav, re.M))
    pages = {p.name for p in DOCS.glob("*.md")}
    assert listed <= pages, f"in the nav but missing: {sorted(listed - pages)}"
    assert pages <= listed, f"not in the nav: {sorted(pages - listed)}"


def test_repository_paths_named_in_the_docs_exist() -> None:
    """A file or folder the docs name in code (`app/web/state.py`, `tests/engine/test_arena.py`) is there."""
    pattern = re.compile(r"(?<![\w/.-])((?:app|engine|tests|bench|static|templates|attention_lab|docs)/[\w./-]*)")
    missing = [
        f"{s.where()}: {path}"
        for page in PAGES
        for s in scan(page)[2]
        for path in pattern.findall(s.text)
        if not (ROOT / path.rstrip(".")).exists()
    ]
    assert not missing, "\n".join(missing)


def test_the_api_reference_is_what_the_schema_says() -> None:
    """docs/api.md is generated from the app's OpenAPI schema; regenerate it (`make docs`) when a route changes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTENTION_LAB_")}
    done = subprocess.run(
        [sys.executable, str(DOCS / "gen_api.py"), "--check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    page = (DOCS / "api.md").read_text(encoding="utf-8")
    assert "### POST /api/v1/attention" in page and "### AttentionRequest" in page


def test_the_api_reference_states_every_bound_a_field_has() -> None:
    """/api/v1/demo/rope's d_k is a multiple of 2 (d_k=3 is a 422), but docs/api.md said "integer ≥ 2, ≤ 1024": the
    reference dropped OpenAPI's multipleOf. Every parameter with one says it."""
    page = (DOCS / "api.md").read_text(encoding="utf-8")
    rope = page[page.index("### GET /api/v1/demo/rope") :].split("\n### ", 1)[0]
    row = next(line for line in rope.splitlines() if line.startswith("| `d_k` |"))
    assert "a multiple of 2" in row and "≥ 2" in row and "≤ 1024" in row
