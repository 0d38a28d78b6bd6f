"""Which folders are runs, and which may never become one.

A run folder is one whose config.json carries a config hash; the files a run writes at its
top are listed here so that a folder holding only them is known for a run's, not the user's.
"""

from __future__ import annotations

from pathlib import Path

from mushroom.data.runfolder import run_config_file

# What a run writes at the top of its folder: a folder holding only these (a run whose
# config.json was lost) is no folder of the user's own files.
RUN_FILES = frozenset(
    "config.json versions.json stages.json summary.json failures.jsonl scores.json scores.md "
    "submission.zip stack.json items predictions raw val members responses.cache.jsonl cascade cascade.jsonl "
    "cascade-plan.jsonl".split()
)


# the files every run writes at the top of its folder (config.json is checked on its own, and
# a folder with versions.json or stages.json is a run's, RUN_MARKS)
TOP_FILES = frozenset("summary.json failures.jsonl submission.zip".split())


def parent_run(folder: Path) -> Path | None:
    """The run folder that `folder` is, or lies inside at any depth; None outside every run."""
    folder = Path(folder).resolve()
    return folder if run_config_file(folder / "config.json") is not None else enclosing_run(folder)


def enclosing_run(folder: Path) -> Path | None:
    """The run folder that `folder` lies inside, if any: a parent whose config.json has a config hash.

    Only a run's own config.json counts (a user's project folder may hold a config.json of
    its own), and the folder itself does not: resuming a run is its whole point.
    """
    for parent in Path(folder).resolve().parents:
        if run_config_file(parent / "config.json") is not None:
            return parent
    return None


def protected_folder(folder: Path) -> str | None:
    """Why `folder` may not be a run folder: it holds the project, its data, or where later runs go.

    `detect --out .` in the checkout (or `--out /`) made a run folder of it, and every later
    run, `./run.sh` too, was refused as "inside the run folder". A folder that holds the data
    or contexts a run reads, the package, the default folder of runs, the home folder or the
    file system's root is refused; None where the folder is free.
    """
    from mushroom.data import contexts, splits

    target = Path(folder).resolve()
    if target == Path(target.anchor) or target == Path.home().resolve():
        return "the file system's root" if target == Path(target.anchor) else "the home folder"
    ws = splits.workspace()
    kept = {
        "the official data": splits.DEFAULT_DATA_DIR,
        "the context files": contexts.DEFAULT_CONTEXT_DIR,
        "the mushroom package": Path(__file__).resolve().parents[1],
        "where runs go by default (runs/, submissions/, eval/)": ws,
        # the default folders themselves: `--out runs` made every later default run "inside" it
        "later runs by default": ws / "runs",
        "later submissions by default": ws / "submissions",
        "later comparisons and sweeps by default": ws / "eval",
    }
    for what, path in kept.items():
        if path.resolve().is_relative_to(target):
            return (
                f"{'the folder of' if path.resolve() == target else 'the folder that holds'} {what} ({path})"
            )
    return None


def held_runs(folder: Path) -> list[str]:
    """The run folders directly inside `folder`, when it is no run itself (`--out runs/`)."""
    folder = Path(folder)
    if not folder.is_dir() or run_config_file(folder / "config.json") is not None:
        return []
    return sorted(
        p.name for p in folder.iterdir() if p.is_dir() and run_config_file(p / "config.json") is not None
    )
