"""`stack apply` as a run: a fitted stack over its members' files, into a run folder of its own.

It goes through the run service like every run, so the folder is locked and its config
kept, the stack's warnings land in the summary, test files are zipped and val (or labelled
items) is scored. The stack is applied a chunk at a time (`mushroom.combine.stack.stream`)
and its files written as it goes, so an items file of a million answers is never held.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mushroom.runs.reporter import PlainReporter, Reporter
from mushroom.util.words import plural

if TYPE_CHECKING:
    from mushroom.combine.stack import Member, StackModel
    from mushroom.combine.stack.stream import StackChunk
    from mushroom.data.records import Item


def settings_changes(model: StackModel, members: list[Member]) -> list[str]:
    """A warning per member whose run was made with other settings than the run it was fitted on."""
    from mushroom.runs.confighash import NOT_SET, config_changes, listed_changes

    said = []
    for member in members:
        fitted, given = model.member_settings.get(member.name), member.settings()
        if fitted is None or given is None:
            continue
        # an option one of the two runs' versions did not have says nothing of its value
        changes = [c for c in config_changes(fitted, given) if NOT_SET not in c]
        if changes:
            said.append(
                f"member {member.name!r}: {member.path} was made with other settings than the run the "
                f"stack was fitted on (fitted -> given:{listed_changes(changes, ' ')}); the stack weighs "
                "its evidence as the fitted run made it: make the run with the fitted settings, or fit "
                "the stack again"
            )
    return said


def _items_split_of_older_folder(out: Path) -> None:
    """Names the split "items" in a `stack apply --items` folder made before it was so named.

    Such a folder's config said the default split ("test"); this run's says "items", and the
    folder was refused as another run's, with advice to run again with settings no flag gives.
    """
    from mushroom.data.runfolder import run_config_file, write_json

    saved = run_config_file(out / "config.json")
    config = saved["config"] if saved is not None else {}
    if (
        config.get("job") == "stack-apply"
        and config.get("items") is not None
        and config.get("split") != "items"
    ):
        from mushroom.runs.confighash import config_hash

        renamed = {**config, "split": "items"}
        # hashed anew: a config whose settings do not give its hash reads as edited by hand
        write_json(out / "config.json", {**saved, "config": renamed, "config_hash": config_hash(renamed)})


def apply_stack_run(
    model: StackModel,
    members: list[Member],
    out: Path,
    split: str = "test",
    langs: list[str] | None = None,
    reporter: Reporter | None = None,
    items_file: Path | None = None,
) -> Path:
    """Writes the stack's checked prediction files of `split` (or an items file) to `out`.

    Val is scored, and so is an items file whose items are all labelled. On the split the
    stack was fitted on, the scores are in-sample (optimistic), and the table's title says so.

    Args:
        model: a fitted stack.
        members: its members' runs (of `split`, or `detect --items` runs of `items_file`).
        out: the run folder.
        split: the split whose member files are read; "items" with `items_file`.
        langs: only these languages.
        reporter: where messages and tables go.
        items_file: a JSONL items file (or a `save_to_disk` folder) the members were run on.

    Returns:
        The run folder.
    """
    from mushroom.combine.stack.stream import iter_apply_stack
    from mushroom.data.runfolder import made_from
    from mushroom.data.splits import LABELLED_SPLITS, load_split, same_items
    from mushroom.runs.service import RunService

    reporter = reporter or PlainReporter()
    if items_file is not None:  # its config said the split it was not (score then advised test gold)
        split = "items"
    config = {
        "job": "stack-apply",
        "stack": model.model_dump(mode="json"),
        # absolute: the same command from another folder (ac/lex, /tmp/ac/lex) resumes it
        "members": [f"{m.name}={m.path.resolve()}" for m in members],
        "split": split,
        "langs": langs,
        **({"items": str(Path(items_file).resolve())} if items_file is not None else {}),
        **made_from(items_file),
    }
    data: Mapping[str, Iterable[Item]] = (
        _items_file_data(items_file, langs) if items_file is not None else load_split(split, langs)
    )
    kept = _finished_languages(out, config, members, split, list(data))
    todo = {lang: items for lang, items in data.items() if lang not in kept}
    if kept:  # a resumed folder: languages whose file was written are not done again
        reporter.message(
            f"{', '.join(sorted(kept))} written by an earlier run of the same command; "
            "the other languages are done now",
            lead="resuming:",
        )
    # Members are read and checked before the run folder exists: wrong or missing members
    # leave none (the generator opens and checks every member file on its first step).
    told: list[str] = settings_changes(model, members)
    chunks = iter_apply_stack(model, members, split, todo, warn=told.append)
    first = next(chunks, None)
    if items_file is not None:
        _items_split_of_older_folder(out)
    service = RunService(out, config, reporter, quiet=True)
    for warning in told:  # reported, and kept in the run's summary
        service.warn(warning)
    files = {
        **kept,
        **write_stack_files(itertools.chain([first] if first is not None else [], chunks), out, split),
    }
    files = {lang: files[lang] for lang in sorted(files)}
    for warning in told:  # what later chunks said (a warning is kept once)
        service.warn(warning)
    written = len(files) - len(kept)  # a resumed run's kept files were not written again
    reporter.message(
        f"wrote {plural(written, 'prediction file')} to {out}"
        + (f" ({len(kept)} kept from the earlier run)" if kept else "")
    )
    fitted = [lang for lang in model.cv if lang != "mean"] or model.languages
    unseen = sorted(set(data) - set(fitted)) if fitted else []
    if unseen:
        reporter.message(
            f"{', '.join(unseen)}: the stack was not fitted on {'it' if len(unseen) == 1 else 'them'} "
            f"(fitted on {', '.join(sorted(fitted))}): "
            + (
                "their hard labels come from its second stack, fitted without language columns, "
                "their soft labels from the first with no language feature"
                if model.unseen_hard is not None
                else "the pooled threshold and no language feature apply there (a stack saved "
                "before 2026-11-29: fitted again, its second stack gives their hard labels)"
            )
            + ", and its cross-validated scores do not speak for them",
            lead="note:",
        )
    summary: dict[str, Any] = {"files": [p.name for p in files.values()]}
    if same_items(split, "test"):  # test-labeled's files are test's: a submission as well
        zipped = service.submit(list(files.values()), out / "submission.zip")
        summary["zip"] = zipped.name if zipped else None
    if split in LABELLED_SPLITS:
        same = in_sample(model, split, list(data))
        title = f"stack on {split}" + (" (IN-SAMPLE: fitted on these items)" if same else "")
        if same:
            cv = "; ".join(
                f"{lang} IoU {model.cv[lang]['iou']:.4f} Cor {model.cv[lang]['cor']:.4f}"
                for lang in same
                if lang in model.cv
            )
            service.warn(
                f"the scores below are in-sample for {', '.join(same)}: the stack was fitted on these "
                f"items, so they are optimistic; its cross-validated scores: {cv or 'see stack fit'}"
            )
        service.score(split, files, out, title)
    if split == "items" and all(getattr(its, "labelled", False) for its in data.values()):
        fitted_items = _fitted_items_among(model, data)
        if fitted_items:
            service.warn(
                f"{fitted_items}: their scores below are in-sample (optimistic), as `stack apply "
                "--split val` says; the stack's cross-validated scores are `cv` in its stack.json"
            )
        title = f"stack on {items_file}" + (" (IN-SAMPLE in part)" if fitted_items else "")
        service.score(split, files, out, title, items=dict(data))  # type: ignore[arg-type]
    service.finish(summary)
    return out


def _fitted_items_among(model: StackModel, data: Mapping[str, Iterable[Item]]) -> str | None:
    """Which items of an items file the stack was fitted on (same id and answer), said per language.

    A copy of the val items in a file of one's own was scored with no word of it, where
    `--split val` warns that those scores are in-sample.
    """
    from mushroom.data.runfolder import in_sample_languages
    from mushroom.data.splits import load_split
    from mushroom.errors import MushroomError

    split = (model.fitted_on or "val").partition(":")[0].strip()
    said = []
    for lang, items in data.items():
        if not in_sample_languages(model.fitted_on, model.languages, split, [lang]):
            continue
        try:
            (fitted,) = load_split(split, [lang]).values()
        except MushroomError:  # a language the split lacks, or a split not here
            continue
        answers = {it.id: it.model_output_text for it in fitted}
        n = sum(answers.get(it.id) == it.model_output_text for it in items)
        if n:
            said.append(f"{n} of the {lang} items are {split} items the stack was fitted on")
    return "; ".join(said) or None


def in_sample(model: StackModel, split: str, langs: list[str]) -> list[str]:
    """The languages of `langs` whose `split` items the stack was fitted on."""
    from mushroom.data.runfolder import in_sample_languages

    return in_sample_languages(model.fitted_on, model.languages, split, langs)


def _items_file_data(items_file: Path, langs: list[str] | None) -> Mapping[str, Iterable[Item]]:
    """An items file's languages, checked whole and read a chunk at a time (an index of lines)."""
    from mushroom.data.itemstream import keep_langs, read_items_file

    return keep_langs(read_items_file(items_file), langs, items_file)


def _finished_languages(
    out: Path, config: dict, members: list[Member], split: str, langs: list[str]
) -> dict[str, Path]:
    """The languages an earlier run of the same config wrote into `out`, with their files.

    A language's file is renamed into place only when complete, so one that exists is done;
    a Ctrl-C said the run would go on where it stopped, and a re-run did everything again
    (106 s against 108 s for 20,000 items). A file older than a member's file of its
    language is done again: that member was run again since.
    """
    from mushroom.data.predictions import submission_name
    from mushroom.data.runfolder import run_config_file
    from mushroom.errors import MushroomError
    from mushroom.runs.confighash import config_hash

    saved = run_config_file(out / "config.json") if out.is_dir() else None
    if saved is None or saved.get("config_hash") != config_hash(config):
        return {}
    done = {}
    for lang in langs:
        path = out / submission_name(lang, split)
        if not path.is_file():
            continue
        try:
            newest = max(m.files(split, lang)[0].stat().st_mtime for m in members)
        except (OSError, MushroomError):
            continue  # a member file gone: the normal path says so
        if path.stat().st_mtime >= newest:
            done[lang] = path
    return done


def write_stack_files(chunks: Iterable[StackChunk], out: Path, split: str) -> dict[str, Path]:
    """Each language's prediction file in `out`, written a chunk at a time and checked against its items.

    What the main job's stack-apply stage needs too: `write_stack_files(iter_apply_stack(...),
    out, "test")` writes its submission files without holding the split. A file is renamed
    into place when its language is complete; a refused chunk (a bad span) leaves no file of
    that language.

    Returns:
        The written file of each language.
    """
    from mushroom.data.jsonl import JsonlWriter
    from mushroom.data.predictions import submission_name
    from mushroom.errors import DataError
    from mushroom.evaluation.check import check_rows

    files: dict[str, Path] = {}
    writer: JsonlWriter | None = None
    lang = None
    try:
        for chunk in chunks:
            if chunk.lang != lang:
                if writer is not None and lang is not None:
                    writer.commit()
                    files[lang] = writer.path
                lang = chunk.lang
                writer = JsonlWriter(out / submission_name(lang, split))
            rows = [p.submission_dict() for p in chunk.predictions]
            report = check_rows(enumerate(rows, start=1), chunk.items, str(writer.path), partial=True)
            if not report.ok:
                raise DataError(report.errors)
            writer.write(rows)
        if writer is not None and lang is not None:
            writer.commit()
            files[lang] = writer.path
    finally:
        if writer is not None:
            writer.discard()
    return files
