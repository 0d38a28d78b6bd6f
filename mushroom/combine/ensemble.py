"""Per-character voting across runs: each run is one annotator.

As in the best open Mu-SHROOM system, a character is hallucinated when the share of runs
marking it exceeds a threshold, and its soft probability is that share (or, selectably,
the mean of the runs' soft probabilities, which keeps more ranking information for Cor).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from mushroom.data.predictions import (
    THRESHOLD_1,
    SoftMode,
    items_of_file,
    prediction_langs,
    prediction_vectors,
    vote,
)
from mushroom.data.records import Item, Prediction
from mushroom.data.runfolder import FailureCheck, refuse_edited_answers
from mushroom.errors import DataError, MushroomError
from mushroom.util.words import listed, no_prediction, plural


def ensemble_item(
    item_id: str,
    runs: list[Prediction],
    length: int,
    threshold: float = 0.5,
    soft_mode: SoftMode = SoftMode.vote,
) -> Prediction:
    """Combines one item's predictions from several runs."""
    if not runs:
        raise MushroomError(f"no run has a prediction for item {item_id!r}")
    softs, masks = zip(*(prediction_vectors(p, length) for p in runs))
    return vote(item_id, list(softs), list(masks), threshold, soft_mode)


def span_overflow(pred: Prediction, length: int) -> str | None:
    """A description of the first span past the end of a text of `length` characters, if any."""
    answer = f"the answer's {plural(length, 'character')}"
    soft, hard = pred.given_labels()  # a kind derived from the other is inside when that one is
    for i, span in enumerate(soft or []):
        if span.end > length:
            return f"soft_labels.{i} [{span.start}, {span.end}) ends past {answer}"
    for i, (start, end) in enumerate(hard or []):
        if end > length:
            return f"hard_labels.{i} [{start}, {end}) ends past {answer}"
    return None


def ensemble(
    runs: list[dict[str, Prediction]],
    items: list[Item] | Mapping[str, int] | None = None,
    threshold: float = 0.5,
    soft_mode: SoftMode = SoftMode.vote,
    names: list[str] | None = None,
) -> list[Prediction]:
    """Votes per character over runs that cover the same items.

    Args:
        runs: one id -> prediction mapping per run.
        items: the items, or item id -> text length; without them the length is the furthest
            span end (nothing is cut, but nothing is checked either: the CLI always has them).
        threshold: a character is hard-labelled when its vote share exceeds this, in [0, 1].
        soft_mode: `vote` (share of runs) or `mean` (mean soft probability).
        names: what to call each run in errors (its file); default "run 1", "run 2", ...

    Raises:
        DataError: a run covers other items than the first (named by `names`).
        MushroomError: an id is not among the items, a span ends
            past its answer (spans are never clipped), or the threshold is outside [0, 1].
    """
    if not runs:
        raise MushroomError("ensemble needs at least one run")
    if not 0.0 <= threshold <= 1.0:
        raise MushroomError(f"the threshold must be in [0, 1], got {threshold}")
    if threshold == 1.0:
        raise MushroomError(THRESHOLD_1)
    names = names or [f"run {k}" for k in range(1, len(runs) + 1)]
    ids = list(runs[0])
    for name, run in zip(names[1:], runs[1:]):
        if set(run) != set(ids):
            absent = [i for i in ids if i not in run]
            extra = [i for i in run if i not in runs[0]]
            parts = [f"no prediction for {listed(absent)}"] if absent else []
            parts += [f"ids that {names[0]} lacks: {listed(extra)}"] if extra else []
            raise DataError.single(
                name, None, "id", f"covers other items than {names[0]}: {'; '.join(parts)}"
            )
    lengths: Mapping[str, int] = {}
    if items is not None:
        lengths = items if isinstance(items, Mapping) else text_lengths(items)
        unknown = [i for i in ids if i not in lengths]
        if unknown:
            raise MushroomError(
                f"{plural(len(unknown), 'predicted id')} not among the items: {listed(unknown)}"
            )
    out = []
    for item_id in ids:
        preds = [run[item_id] for run in runs]
        length = lengths.get(item_id)
        if length is None:
            ends = [s.end for p in preds for s in p.soft_labels] + [
                e for p in preds for _, e in p.hard_labels
            ]
            length = max(ends, default=0)
        for name, pred in zip(names, preds):
            overflow = span_overflow(pred, length)
            if overflow:
                raise MushroomError(f"{name}, item {item_id!r}: {overflow}")
        out.append(ensemble_item(item_id, preds, length, threshold, soft_mode))
    return out


def text_lengths(items: list[Item]) -> dict[str, int]:
    """Item id -> length of its answer: what span checks need."""
    return {item.id: len(item.model_output_text) for item in items}


_SHIPPED_ID = re.compile(r"^(val|tst)-([a-z]{2})-\d+$")


def shipped_lengths(ids: list[str]) -> tuple[dict[str, int] | None, str | None]:
    """Answer lengths of ids from the shipped val/test splits (`val-en-1`, `tst-de-7`).

    Lets `ensemble` check spans without `--items` for the official data, where the ids say
    which file holds the item. Returns (lengths, None), or (None, the first id the shipped
    files do not hold), so that the refusal can name it.
    """
    from mushroom.data.splits import item_files, load_split

    wanted: dict[tuple[str, str], list[str]] = {}
    for rid in ids:
        match = _SHIPPED_ID.match(rid)
        if match is None:
            return None, rid
        split = "val" if match.group(1) == "val" else "test"
        wanted.setdefault((split, match.group(2)), []).append(rid)
    lengths: dict[str, int] = {}
    for (split, lang), some in wanted.items():
        # no data folder is said as such (it was blamed on the ids)
        split, found = item_files(split)
        if lang not in found:
            return None, some[0]
        lengths.update(text_lengths(load_split(split, [lang])[lang]))
    stray = next((rid for rid in ids if rid not in lengths), None)
    return (lengths, None) if stray is None else (None, stray)


def run_inputs(paths: list[Path], lang: str | None, split: str | None) -> list[Path]:
    """The prediction file of each input: a file as it is, a run folder's file of `lang`.

    A folder is any layout `score` and the stack read (a main job, a `detect` run, a `run`
    variant, a plain folder of prediction files).
    """
    from mushroom.data.predictions import submission_name
    from mushroom.data.runfolder import prediction_folder

    out = []
    for path in paths:
        if not path.is_dir():
            out.append(path)
            continue
        split_, folder = (split, prediction_folder(path, split)) if split else _only_split(path)
        code = lang or _only_lang(folder, split_)
        file = folder / submission_name(code, split_)
        if not file.is_file():
            raise MushroomError(
                f"{path}: no {split_} file of language {code!r} ({file}); it holds "
                f"{', '.join(prediction_langs(folder, split_))}"
            )
        out.append(file)
    return out


def refuse_failed(checks: list[FailureCheck], predictions: list[Mapping[str, Prediction]]) -> None:
    """Refuses an input whose run lists failed items among the ones it predicts.

    `--allow-failures` wrote those items empty, and in a vote an empty run is a run that saw
    nothing wrong: two empty runs outvote the one that marked the answer.
    """
    for check, preds in zip(checks, predictions):
        found = check.check(preds)
        if found is not None:
            raise MushroomError(found.message(check.path))


def _only_split(path: Path) -> tuple[str, Path]:
    """(split, its prediction folder) of a run folder holding files of one split only."""
    from mushroom.data.runfolder import items_files, prediction_folder, variant_names

    found = []
    for split in ("val", "test", "train"):  # test-labeled's files are test's
        try:
            found.append((split, prediction_folder(path, split)))
        except MushroomError:
            continue
    if len(found) == 1:
        return found[0]
    variants = sorted({v for split in ("val", "test") for v in variant_names(path, split)})
    if not found and variants:
        raise MushroomError(
            f"{path}: it holds the variants {', '.join(variants)} of a run config: give one, "
            f"e.g. {path / variants[0]}"
        )
    if not found and items_files(path):  # a run over an items file (detect, stack apply)
        return "items", prediction_folder(path, "items")
    if not found:
        raise MushroomError(
            f"{path}: no val, test or train prediction files (a run folder, or a folder of them)"
        )
    raise MushroomError(
        f"{path}: a run folder with files of {' and '.join(s for s, _ in found)}: give --split "
        + " or --split ".join(s for s, _ in found)
    )


def _only_lang(folder: Path, split: str) -> str:
    codes = prediction_langs(folder, split)
    if len(codes) != 1:
        example = f", e.g. --lang {codes[0]}" if codes else ""
        raise MushroomError(
            f"{folder}: prediction files of {len(codes)} languages ({', '.join(codes)}): give --lang{example}"
        )
    return codes[0]


def vote_files(
    preds: list[Path],
    out: Path,
    items: list[Item] | None = None,
    threshold: float = 0.5,
    soft_mode: SoftMode = SoftMode.vote,
) -> list[Prediction]:
    """Votes over prediction files and writes the vote to `out` (checked against `items` if given).

    The files must share items (files of two languages or splits share none, and every line
    of the second would be "not among the items" without the reason named), none may hold a
    failed run's empty items, and every span must fit its answer: the lengths come from
    `items` or, for ids of the shipped val/test files, from those files.
    """
    from mushroom.data.jsonl import write_jsonl
    from mushroom.data.predictions import load_predictions
    from mushroom.evaluation.submission import write_predictions

    loaded = [load_predictions(p) for p in preds]
    ids_of = [set(found) for found in loaded]
    for path, ids in zip(preds, ids_of):
        if not ids:
            raise DataError.single(path, None, None, "no predictions in the file")
        if not ids & ids_of[0]:
            raise MushroomError(
                f"{path} has no item in common with {preds[0]}: an ensemble votes over runs of the same "
                "items (files of other languages or splits?)"
            )
    checks = [FailureCheck(p) for p in preds]  # each run's ledger read once, for both checks
    refuse_failed(checks, loaded)
    if items is not None:
        items, _ = items_of_file(items, preds[0])  # a mixed items file: the inputs' language
        # said of the input that lacks them: the check of the vote named --out, a file never written
        wanted = [it.id for it in items]
        for path, ids in zip(preds, ids_of):
            lacking = [i for i in wanted if i not in ids]
            if lacking:
                said = f"{no_prediction(lacking, total=len(wanted))} (the items of --items)"
                raise DataError.single(
                    path, None, "id", f"{said}; an ensemble votes over files of the same items"
                )
        refuse_edited_answers(checks, items)  # spans of an answer edited since would mark other words
        lengths = text_lengths(items)
    else:
        found, stray = shipped_lengths(sorted(ids_of[0]))
        if found is None:
            raise MushroomError(
                f"{preds[0]}: the ids are not all from the shipped val/test files (id {stray!r} is not), "
                "so the answers' lengths are unknown; pass --items FILE (the items the predictions are for)"
            )
        lengths = found
    runs = [load_predictions(p, lengths) for p in preds]
    combined = ensemble(runs, lengths, threshold, soft_mode, names=[str(p) for p in preds])
    if items is not None:
        write_predictions(out, combined, items)
    else:
        write_jsonl(out, [p.submission_dict() for p in combined])
    return combined
