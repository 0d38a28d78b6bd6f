"""The `mushroom` command line: the typer app, its commands (one module per job) and `main`.

Each command parses its options, calls one function of the layer below and prints; the
commands live in scoring (score, check), combine (ensemble, stack), detect (detect,
main-job, run), evaluate (compare, sweep, report), contexts and models.
"""

from __future__ import annotations

from typing import Annotated

import typer

from mushroom.cli import combine, contexts, detect, evaluate, scoring
from mushroom.cli.boundary import (
    FLAG,
    after_command,
    echo,
    esc,
    out_console,
    reflow_help,
    run_cli,
    set_debug,
)
from mushroom.cli.models import models_app
from mushroom.util.options import field_default

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Find hallucinated spans in LLM answers (Mu-SHROOM): detect, ensemble, check, score.",
)


def _print_version(given: bool) -> None:
    """`mushroom --version`: the version, as a bug report or a run's versions.json names it."""
    if given:
        from mushroom.version import __version__

        echo(f"mushroom {__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", metavar=FLAG, help="show the Python traceback of any error (for bug reports)"
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            metavar=FLAG,
            is_eager=True,
            callback=_print_version,
            help="print the version and exit",
        ),
    ] = False,
) -> None:
    """Find hallucinated spans in LLM answers (Mu-SHROOM): detect, ensemble, check, score."""
    set_debug(debug)


# In this order in `mushroom --help`.
app.command()(scoring.score)
app.command()(scoring.check)
app.command()(combine.ensemble)
app.command()(detect.detect)
app.command()(detect.main_job)
app.command("run")(detect.run_config)
app.command()(evaluate.compare)
app.command()(evaluate.sweep)
app.command()(evaluate.report)
app.command("contexts")(contexts.contexts_cmd)
app.add_typer(combine.stack_app, name="stack")
app.add_typer(models_app, name="models")


def _print_fields(fields: dict) -> None:
    """A settings model's fields as `detectors` and `backends` list them: key = default  description."""
    for key, info in fields.items():
        out_console.print(
            f"    {esc(key)} = {esc(field_default(info))}  {esc(info.description or '')}", highlight=False
        )


@app.command("detectors")
def list_detectors() -> None:
    """List the registered detectors and their options, with real defaults."""
    from mushroom.detectors import available, detector_class

    for name in available():
        cls = detector_class(name)
        doc = (cls.__doc__ or "").strip().splitlines()
        out_console.print(f"[bold]{esc(name)}[/bold]: {esc(doc[0] if doc else '')}", highlight=False)
        _print_fields(cls.Options.model_fields)


@app.command("backends")
def list_backends() -> None:
    """List the backend kinds and their settings (-o backend.KEY=VALUE; pyes: in models=[...])."""
    from mushroom.backends.config import config_class_or_none
    from mushroom.backends.registry import BACKENDS, backend_names
    from mushroom.errors import install_hint

    for name in backend_names():
        try:
            cls = config_class_or_none(name)
        except Exception as exc:  # noqa: BLE001 - a third party's broken entry point: said, not fatal
            out_console.print(
                f"[bold]{esc(name)}[/bold]: cannot be listed ({esc(str(exc))})", highlight=False
            )
            continue
        part = BACKENDS.builtins.get(name)
        extra = f"  ({install_hint(part.extra)})" if part is not None and part.extra else ""
        doc = (cls.__doc__ or "").strip().splitlines() if cls is not None else []
        out_console.print(
            f"[bold]{esc(name)}[/bold]: {esc(doc[0] if doc else '')}{esc(extra)}", highlight=False
        )
        if cls is not None:
            _print_fields({key: info for key, info in cls.model_fields.items() if key != "kind"})


reflow_help(app)


def _replace_unencodable() -> None:
    """Lets a stdout or stderr that is not UTF-8 show `?` for what it cannot encode.

    Under a Latin-1 or ASCII locale a table's "…" (or an answer's Arabic) stopped the command
    with "internal error: UnicodeEncodeError", after its files were written but before its
    summary: exit 70, "a bug in mushroom".
    """
    import sys

    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):  # a stream already closed, or one that cannot change
                pass


def main() -> None:
    """Entry point: every expected failure is a clear message and an exit code (README)."""
    import os

    # Third-party download/loading bars ("Loading weights") would interleave with ours.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    _replace_unencodable()
    code = run_cli(app)
    after_command()  # the work is done or said: a Ctrl-C as the process ends changes nothing
    raise SystemExit(code)


if __name__ == "__main__":
    main()
