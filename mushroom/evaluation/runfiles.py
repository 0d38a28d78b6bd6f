"""Scoring the files of a run folder (or loose files) against gold, as `score` takes them.

A run folder stands for its prediction files of the gold's split; a run made with --lang or
--limit is scored on what it covers, and the caller is told so through `note` (the command
line prints those lines on stderr, so stdout stays the official two lines).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mushroom.data.runfolder import FailureCheck
from mushroom.errors import MushroomError
from mushroom.util.words import listed, plural

if TYPE_CHECKING:
    from mushroom.data.runfolder import RunScope
    from mushroom.evaluation.score import ScoreResult


def score_run_files(
    gold: Path,
    pred: Path,
    langs: list[str] | None,
    show_pairing: bool = False,
    role: str = "PRED",
    partial: bool = False,
    note: Callable[[str], None] = print,
) -> ScoreResult:
    """Scores PRED against gold; a run made with --limit only on the items it predicted, said by `note`.

    A run made with --lang has files for its languages only: the others are listed, not
    errors. Without a run folder (files given directly) or for a run over every item, each
    gold item must have a prediction, as the official scorer requires. PRED may be a dataset
    saved from `predictions_to_dataset`: its rows are scored as a prediction file's lines.
    """
    from mushroom.data.hf import is_saved_dataset, refuse_part_of_dataset, saved_gold
    from mushroom.evaluation.saved_predictions import saved_predictions
    from mushroom.evaluation.score import require_path

    require_path("GOLD", gold)
    if gold.is_file() and zipfile.is_zipfile(gold):  # it was read as one language's gold file
        raise MushroomError(f"GOLD {gold} is a zip archive: unzip it into a folder and give that folder")
    refuse_part_of_dataset(gold, "GOLD")
    if not is_saved_dataset(pred):
        return _score_run_files(gold, pred, langs, show_pairing, role, partial, note)
    if is_saved_dataset(gold):
        gold = saved_gold(gold)
    saved = saved_predictions(pred, gold)
    try:
        result = _score_run_files(
            gold, saved.path, langs, show_pairing, role, partial, lambda line: note(saved.text(line))
        )
    except MushroomError as exc:
        raise saved.said(exc) from None
    result.warnings = [saved.text(line) for line in result.warnings]
    return result


def _score_run_files(
    gold: Path,
    pred: Path,
    langs: list[str] | None,
    show_pairing: bool,
    role: str,
    partial: bool,
    note: Callable[[str], None],
) -> ScoreResult:
    """`score_run_files` of PRED a file, a folder of files or a run folder; GOLD is there."""
    from mushroom.data.hf import is_saved_dataset, saved_gold, saved_items_file
    from mushroom.data.predictions import prediction_langs, submission_name
    from mushroom.data.runfolder import items_files, prediction_folder, run_scope, variant_names
    from mushroom.data.splits import lang_from_filename
    from mushroom.evaluation.saved_predictions import SavedPredictions
    from mushroom.evaluation.score import files_by_lang, pair_paths, score_pairs

    checked: dict[Path, FailureCheck] = {}  # ledgers read for the edit check, read once
    if gold.is_dir() and not is_saved_dataset(gold) and not files_by_lang(gold)[0]:
        # the run was blamed: "made with --items, so it has no val files"
        raise MushroomError(
            f"GOLD {gold}: a folder with no per-language files (such as mushroom.en-val.v2.jsonl), "
            "and not a dataset saved with save_to_disk"
        )
    if is_saved_dataset(gold):
        # a folder of Dataset.save_to_disk: for a `detect --items` run, as the items file it
        # was made from (its files are per language of that file: a folder of official
        # files was looked for in it as in a split run); else as official per-language files
        rows: dict[Path, list[int]] = {}
        given, gold = (
            gold,
            saved_items_file(gold, rows)
            if pred.is_dir() and items_files(pred)
            else saved_gold(gold, rows_of=rows),
        )
        if gold.is_dir() and pred.is_file():  # it said "GOLD is a folder", of a folder the user never made
            langs_held = sorted(files_by_lang(gold)[0])
            raise MushroomError(
                f"GOLD {given} is a saved dataset of {len(langs_held)} languages ({', '.join(langs_held)}), "
                f"{role} {pred} one file: give a folder of per-language prediction files (such as "
                "mushroom.en-val.v2.jsonl), a dataset of predictions, or gold of the file's language only"
            )
        # what is wrong with its rows is said of the dataset's folder and row, not of the
        # temporary files they were written to ("/tmp/mushroom-hf-.../items.jsonl" meant nothing)
        saved = SavedPredictions(given, gold, rows)
        try:
            result = _score_run_files(gold, pred, langs, show_pairing, role, partial, note)
        except MushroomError as exc:
            raise saved.said(exc) from None
        result.warnings = [saved.text(line) for line in result.warnings]
        return result
    scope = run_scope(pred)
    test = any(gold.glob("*-tst*.jsonl")) if gold.is_dir() else "-tst" in gold.name
    split = "test" if test else "val"
    in_sample = in_sample_note(pred, split)
    if pred.is_dir():
        # A run folder (or a variant's folder of a run config), as compare, sweep and report
        # take it: its files of the gold's split. A plain folder of files is taken as it is.
        own = items_files(pred)
        if gold.is_file() and len(own) > 1:  # a file per language of one items file
            return _score_items_run(gold, own, langs, partial or (scope is not None and scope.partial), note)
        if gold.is_file() and len(own) == 1:  # a `detect --items` run, scored against its items
            pred = own[0]
            checked = _refuse_edited(gold, own)
        else:
            try:
                pred = prediction_folder(pred, split, split_flag=False)
            except MushroomError:
                if (scope is not None and pred == scope.folder) or variant_names(pred, split):
                    raise
        lang = lang_from_filename(gold) if gold.is_file() else None
        if lang is not None and (pred / submission_name(lang, split)).is_file():
            pred = pred / submission_name(lang, split)  # one gold file: the run's file of its language
        elif (
            lang is not None
            and pred.is_dir()  # a `detect --items` run's one file was taken above
            and (has := prediction_langs(pred, split))
        ):
            raise MushroomError(  # it said "GOLD is a file, PRED a folder", which a run folder may be
                f"{pred}: no {lang} prediction file ({submission_name(lang, split)}) for GOLD {gold}; "
                f"it has {', '.join(has)}"
            )
    pairing = pair_paths(
        gold, pred, langs, allow_missing=scope is not None and scope.langs is not None, role=role
    )
    if show_pairing:
        for line in pairing.summary():
            note(line)
    if in_sample is not None:
        note(f"warning: {in_sample}")
    result = score_pairs(pairing.pairs, partial=partial or (scope is not None and scope.partial))
    if scope is not None and scope.partial and result.unscored:
        note(scope.note(len(result.ids), result.n_gold))
        lost = _lost_within_limit(pairing.pairs, set(result.ids), scope)
        if lost:  # a line deleted from the file was scored as an item the run never predicted
            result.warnings.append(
                f"{pred}: no prediction for {plural(len(lost), 'item')} its run predicted "
                f"(--limit {scope.limit} covers the first {scope.limit} of each language): "
                f"{listed(lost)}; was its file edited? "
                "The same command on the run folder writes it again"
            )
    elif result.unscored:
        note(
            f"scored {len(result.ids)} of {result.n_gold} gold items (--partial): "
            "the others have no prediction"
        )
    note_failed_items([path for _, _, path in pairing.pairs], note, checked)
    return result


def _lost_within_limit(pairs: list[tuple[str, Path, Path]], scored: set[str], scope: RunScope) -> list[str]:
    """Ids among the first `--limit` gold items of each scored file's language that the predictions lack.

    A run made with `--limit N` (and no cascade budget) predicted exactly the first N items of
    each language, in the gold file's order; one missing was lost from the file, not left out
    by the run. The language is the prediction file's: an items file may hold several
    (`detect --items mixed.jsonl --lang en --limit 3` predicted the first 3 English ones).
    """
    from mushroom.data.languages import language_code
    from mushroom.data.predictions import prediction_file_lang

    if scope.limit is None or scope.budget is not None:
        return []
    lost = []
    for lang, gold, pred in pairs:
        want = lang if lang != "all" else prediction_file_lang(pred.name)
        if want is None:
            continue  # a file of no known language: which items its run took cannot be told
        taken = 0
        with gold.open(encoding="utf-8-sig") as handle:
            for line in handle:
                if taken == scope.limit:
                    break
                try:
                    row = json.loads(line) if line.strip() else None
                    row_lang = language_code(str(row.get("lang", ""))) if row is not None else None
                except (ValueError, AttributeError):
                    return []  # the scorer has read it already; nothing to add here
                if row_lang != want:
                    continue
                taken += 1
                item_id = row.get("id")
                if isinstance(item_id, str) and item_id not in scored:
                    lost.append(item_id)
    return lost


def _refuse_edited(items_file: Path, files: list[Path]) -> dict[Path, FailureCheck]:
    """`refuse_edited_answers` of prediction files against the items file they are scored on.

    Spans of the old answer, scored against the new gold, score words they never marked.
    Returns the checks by file, whose ledgers `note_failed_items` then reads no second time.
    """
    from mushroom.data.runfolder import refuse_edited_answers
    from mushroom.data.splits import load_items

    checks = {p: FailureCheck(p) for p in files}
    # the answers alone are compared: their tokens and logits are not kept
    refuse_edited_answers(checks.values(), lambda: load_items(items_file, answer_evidence=False))
    return checks


def _score_items_run(
    gold: Path, files: list[Path], langs: list[str] | None, partial: bool, note: Callable[[str], None]
) -> ScoreResult:
    """An items file against the run's file of each of its languages, read as one file.

    `detect --items` writes a file per language of a file that mixes them; scored one file
    at a time, each lacked the other languages' ids.
    """
    from mushroom.data.label_files import ScoringFile, read_scoring_file
    from mushroom.data.predictions import prediction_file_lang
    from mushroom.errors import DataError
    from mushroom.evaluation.score import score_loaded

    wanted = [(prediction_file_lang(p.name), p) for p in files]
    wanted = [(lang, p) for lang, p in wanted if langs is None or lang in langs]
    if not wanted:
        raise MushroomError(f"--langs {','.join(langs or [])}: the run has no file of these languages")
    checked = _refuse_edited(gold, [p for _, p in wanted])
    truth = read_scoring_file(gold, True)
    if langs is not None:
        truth.records = {k: r for k, r in truth.records.items() if r.lang in langs}
    merged = ScoringFile(path=files[0].parent, records={})
    for _, path in wanted:
        loaded = read_scoring_file(path, False)
        twice = next((i for i in loaded.records if i in merged.records), None)
        if twice is not None:
            raise DataError.single(path, None, "id", f"id {twice!r} is in another language's file too")
        merged.records.update(loaded.records)
        merged.warnings += loaded.warnings
    result = score_loaded(truth, merged, partial=partial)
    if result.unscored:
        note(f"scored {len(result.ids)} of {result.n_gold} gold items: the others have no prediction")
    note_failed_items([p for _, p in wanted], note, checked)
    return result


def note_failed_items(
    paths: list[Path], note: Callable[[str], None] = print, checked: Mapping[Path, FailureCheck] | None = None
) -> None:
    """Says (by `note`) which scored files hold items their run failed (scored as written).

    `--allow-failures` writes a failed item as an empty prediction, which scores like a
    detector that found nothing; `ensemble` and `stack` refuse such files, and a score of
    one should not pass for the method's. `checked` holds the checks already made of some
    files (their ledgers read once).
    """
    for message in failed_item_messages(paths, checked):
        note(f"note: {message}")


def failed_item_messages(paths: list[Path], checked: Mapping[Path, FailureCheck] | None = None) -> list[str]:
    """One line per file that holds items its run failed; a file its run keeps no record for is not read."""
    from mushroom.data.predictions import load_predictions

    messages = []
    for path in paths:
        failures = (checked or {}).get(path) or FailureCheck(path)
        if not failures.has_record:
            continue
        try:
            predictions = load_predictions(path)
        except MushroomError:  # spans the official scorer takes as they are: scored, and warned about
            continue
        found = failures.check(predictions)
        if found is not None:
            messages.append(f"{found.message(path)} (scored as written)")
    return messages


def run_failure_notes(run: Path, split: str) -> list[str]:
    """`failed_item_messages` of a run folder's prediction files of a split.

    `compare`, `sweep` and `report` printed 0/0 scores of items a run failed and wrote empty
    (`--allow-failures`) without the note that `score` gives.
    """
    from mushroom.data.predictions import submission_glob
    from mushroom.data.runfolder import prediction_folder

    return failed_item_messages(sorted(prediction_folder(run, split).glob(submission_glob(split))))


def in_sample_note(run: Path, split: str) -> str | None:
    """What to say of a `stack apply` run on the split its stack was fitted on: in-sample scores.

    `stack apply` warns of it when it runs; `compare`, `sweep`, `score` and `report` read the
    folder later, and printed its scores beside cross-validated ones as if they were alike.
    """
    from mushroom.data.runfolder import in_sample_languages, run_scope
    from mushroom.data.splits import same_items

    scope = run_scope(run)
    if scope is None or scope.config.get("job") != "stack-apply":
        return None
    if not same_items(str(scope.config.get("split")), split):
        return None
    stack = scope.config.get("stack")
    if not isinstance(stack, dict) or not isinstance(stack.get("languages"), list):
        return None
    ran_on = _written_langs(run, split)
    same = in_sample_languages(str(stack.get("fitted_on") or ""), list(stack["languages"]), split, ran_on)
    if not same:
        return None
    return (
        f"{scope.folder}: a stack applied to the {split} items it was fitted on "
        f"({', '.join(same)}): its scores there are in-sample (optimistic), not out of "
        "fold; the stack's cross-validated scores are `cv` in its stack.json"
    )


# The jobs whose runs end by writing summary.json (with `mushroom run`'s, known by `run_config`).
COMMAND_JOBS = frozenset({"detect", "main", "stack-apply"})


def unfinished_note(run: Path, split: str) -> str | None:
    """What to say of a run folder with no summary.json: a run stopped (or still running).

    Its prediction files are of the languages it finished, and `compare`, `sweep` and
    `report` read them as the whole run: a run stopped in English showed two languages as
    if it had been made on those alone.
    """
    from mushroom.data.runfolder import run_scope

    scope = run_scope(run)
    summary = scope.folder / "summary.json" if scope is not None else None
    if summary is not None and summary.is_file():
        try:
            readable = isinstance(json.loads(summary.read_text(encoding="utf-8")), dict)
        except (OSError, ValueError):
            readable = False
        if readable:
            return None
        # the page and tables went on without the run's warnings (cut-off replies, failed
        # items), with nothing said
        return (
            f"{summary} cannot be read (damaged): the run's own warnings (cut-off replies, failed "
            "items) are not shown; run its command again to write it anew"
        )
    if scope is None:
        return None
    if scope.config.get("job") not in COMMAND_JOBS and "run_config" not in scope.config:
        return None  # a benchmark's member folder: it writes no summary
    done = _written_langs(run, split)
    return (
        f"{scope.folder} has no summary.json: its run was stopped before it finished, or is still "
        f"running; its {split} files are of the languages it finished ({', '.join(done) or 'none'}): "
        "run its command again to finish it"
    )


def _written_langs(run: Path, split: str) -> list[str]:
    """The languages of a run folder's prediction files of a split (none when it has no such files)."""
    from mushroom.data.predictions import prediction_langs
    from mushroom.data.runfolder import prediction_folder

    try:
        return prediction_langs(prediction_folder(run, split), split)
    except MushroomError:
        return []


def run_notes(run: Path, split: str, failures: bool = True) -> list[str]:
    """`run_failure_notes`, the `in_sample_note` and the `unfinished_note` of a run folder.

    `failures` False leaves the first out: the failed items are left out of the scores.
    """
    notes = [in_sample_note(run, split), unfinished_note(run, split)]
    return (run_failure_notes(run, split) if failures else []) + [n for n in notes if n]
