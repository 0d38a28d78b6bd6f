"""MkDocs hook: the CLI reference, generated from the typer app on every build.

docs/reference/cli.md holds the marker `<!-- cli-reference -->`; this hook replaces it with
the Markdown that typer's own docs generator (`typer utils docs`) writes for the click
command behind `mushroom.cli.app:app`, so the reference cannot drift from the commands.
mkdocs-click and mkdocs-typer(2) were tried first: they test parameters against the `click`
package, and typer 0.29 builds its commands on its own copy of click, so they found no
options (or raised). A page with the marker left in, or the marker missing from cli.md,
fails the build rather than shipping a reference without commands.
"""

from __future__ import annotations

import typer
import typer.cli
import typer.main

MARKER = "<!-- cli-reference -->"
PAGE = "reference/cli.md"


def cli_markdown() -> str:
    """Every command, its arguments and options, as typer's docs generator writes them."""
    from mushroom.cli.app import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command, info_name="mushroom")
    ctx.ensure_object(dict)
    # help text is rendered as the terminal shows it (rich markup, not literal brackets)
    ctx.obj[typer.cli.MARKUP_MODE_KEY] = app.rich_markup_mode
    return typer.cli.get_docs_for_click(obj=command, ctx=ctx, name="mushroom", indent=2).strip() + "\n"


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    """Fills the marker of the CLI page; other pages pass through unchanged."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE}: the marker {MARKER} is missing, so the CLI reference would be empty")
    return markdown.replace(MARKER, cli_markdown())
