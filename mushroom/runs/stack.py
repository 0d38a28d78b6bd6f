"""`stack apply` as a run: a fitted stack over its members' files, into a run folder of its own.

It goes through the run service like every run, so the folder is locked and its config
kept, the stack's warnings land in the summary, test files are zipped and val is scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mushroom.runs.reporter import PlainReporter, Reporter
from mushroom.util.words import plural

if TYPE_CHECKING:
    from mushroom.combine.stack import Member, StackModel


def apply_stack_run(
    model: StackModel,
    members: list[Member],
    out: Path,
    split: str = "test",
    langs: list[str] | None = None,
    reporter: Reporter | None = None,
) -> Path:
    """Writes the stack's checked prediction files of `split` to `out`; val is scored.

    On the split the stack was fitted on, the scores are in-sample (optimistic), and the
    table's title says so.

    Returns:
        The run folder.
    """
    from mushroom.combine.stack import apply_stack
    from mushroom.data.predictions import submission_name
    from mushroom.data.splits import load_split
    from mushroom.evaluation.submission import write_predictions
    from mushroom.runs.service import RunService

    reporter = reporter or PlainReporter()
    config = {
        "job": "stack-apply",
        "stack": model.model_dump(mode="json"),
        "members": [f"{m.name}={m.path}" for m in members],
        "split": split,
        "langs": langs,
    }
    # Members are read before the run folder exists: wrong or missing members leave none.
    data = load_split(split, langs)
    told: list[str] = []
    preds = apply_stack(model, members, split, data, warn=told.append)
    service = RunService(out, config, reporter, quiet=True)
    for warning in told:  # reported, and kept in the run's summary
        service.warn(warning)
    files = {}
    for code, items in data.items():
        files[code] = write_predictions(out / submission_name(code, split), preds[code], items)
    reporter.message(f"wrote {plural(len(preds), 'prediction file')} to {out}")
    summary: dict[str, Any] = {"files": [p.name for p in files.values()]}
    if split == "test":
        zipped = service.submit(list(files.values()), out / "submission.zip")
        summary["zip"] = zipped.name if zipped else None
    if split == "val":
        fitted_on = getattr(model, "fitted_on", None) or "val"
        title = f"stack on {split}" + (
            " (IN-SAMPLE: fitted on these items; see `stack fit` for CV)" if fitted_on == split else ""
        )
        service.score(split, files, out, title)
    service.finish(summary)
    return out
