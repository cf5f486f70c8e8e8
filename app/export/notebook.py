"""A page as a Jupyter notebook (nbformat v4): its settings, the code that prints its numbers (both kinds, where the
page has them), the numbers themselves as that code's output, and its figure — all read from the page's JSON twin."""

from __future__ import annotations

import base64
from typing import Any

from .code import printed
from .twin import Page


def numbers(twin: dict[str, Any]) -> str:
    """The page's numbers as the snippets print them: a name line, then one line per row (-inf where masked)."""
    lines: list[str] = []
    for name, rows in printed(twin).items():
        lines.append(str(name))
        lines += [" ".join("-inf" if v is None else f"{v:.6f}" for v in row) for row in rows]
    return "\n".join(lines) + ("\n" if lines else "")


def settings_table(p: Page) -> str:
    rows = [f"| {k} | `{v}` |" for k, v in p.query]
    summary = p.summary
    ran = [f"| {k} | `{summary[k]}` |" for k in ("preset", "d_model", "n_heads", "mask", "scale", "seed", "positions",
                                                   "layer") if k in summary and k not in dict(p.query)]  # fmt: skip
    if p.twin.get("key"):
        ran.append(f"| stage | `{p.twin['key']}` |")
    return "| setting | value |\n|---|---|\n" + "\n".join(rows + ran)


def build(p: Page, page_url: str, lab_code: str | None, torch_code: str | None, png: bytes | None,
          provenance: dict[str, Any] | None) -> Any:  # fmt: skip
    """The notebook (an nbformat NotebookNode), validated."""
    import nbformat
    from nbformat import v4

    title = f"Attention Lab: {p.path}" + (f" · {p.twin['key']}" if p.twin.get("key") else "")
    cells = [
        v4.new_markdown_cell(
            f"# {title}\n\nThe page: <{page_url}> (its numbers: `{p.path.rstrip('/') or '/index'}.json`).\n\n"
            + settings_table(p)
        )
    ]
    printed = numbers(p.twin)
    if lab_code:
        cells.append(v4.new_markdown_cell("## The numbers, with the lab's package"))
        out = [v4.new_output("stream", name="stdout", text=printed)] if printed else []
        cells.append(v4.new_code_cell(lab_code, outputs=out, execution_count=None))
    if torch_code:
        cells.append(v4.new_markdown_cell("## The same numbers, recomputed with plain torch"))
        out = [v4.new_output("stream", name="stdout", text=printed)] if printed else []
        cells.append(v4.new_code_cell(torch_code, outputs=out, execution_count=None))
    if not lab_code and not torch_code and printed:
        cells.append(v4.new_markdown_cell("## The numbers\n\n```\n" + printed + "```"))
    if png:
        figure = v4.new_markdown_cell("## The figure\n\n![The page's figure](attachment:figure.png)")
        figure["attachments"] = {"figure.png": {"image/png": base64.b64encode(png).decode()}}
        cells.append(figure)
    if provenance:
        lines = [f"- **{k}**: `{v}`" for k, v in provenance.items() if not isinstance(v, dict | list)]
        for f in provenance.get("files", []):
            lines.append(f"- `{f['name']}`: sha256 `{f['sha256']}`")
        cells.append(v4.new_markdown_cell("## Provenance\n\n" + "\n".join(lines)))
    nb = v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        "attention_lab": {"page": p.url, **({"provenance": provenance} if provenance else {})},
    })  # fmt: skip
    nbformat.validate(nb)
    return nb
