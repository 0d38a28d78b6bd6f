"""Validating prediction files against their items before anyone uploads them.

Stricter than the official scorer on purpose: the scorer silently accepts overlapping soft
spans (the later one wins) or hard labels with zero soft probability, which are almost
always bugs in the system that wrote them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mushroom.data.jsonl import iter_json_lines
from mushroom.data.label_files import (
    any_misspelled_label,
    empty_answers,
    is_json_int,
    json_shown,
    labels_missing_on_some_lines,
    marks_nothing,
    misspelled_label,
    misspelled_on_every_line,
)
from mushroom.data.records import Item
from mushroom.errors import Problem, duplicate_id, unknown_id
from mushroom.util.words import close_match, no_prediction, plural


@dataclass
class CheckReport:
    """Errors make a file unusable; warnings are worth a look."""

    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    n_lines: int = 0
    n_items: int = 0
    missing: list[str] = field(default_factory=list)
    unknown_ids: int = 0  # lines whose id is not among the items (the wrong items file, often)
    # (line, id, where they part) of lines whose model_output_text is not their item's answer
    other_texts: list[tuple[int, str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary(self) -> str:
        """What was wrong, counted by kind.

        For example `3 errors on 2 lines (of 48 read); no prediction for 12 of 60 items`.

        Errors on lines and items with no prediction are counted apart, since a file missing
        half its items has one problem but many items to fix, and vice versa.
        """
        on_lines = [p for p in self.errors if p.line is not None]
        missing_error = any(p.line is None and p.message.startswith("no prediction for") for p in self.errors)
        others = len(self.errors) - len(on_lines) - int(missing_error)
        parts = []
        if on_lines:
            bad = len({p.line for p in on_lines})
            errors = plural(len(on_lines), "error")
            parts.append(f"{errors} on {plural(bad, 'line')} (of {self.n_lines} read)")
        if missing_error:
            parts.append(f"no prediction for {len(self.missing)} of {plural(self.n_items, 'item')}")
        if others > 0:
            parts.append(plural(others, "other error"))
        return "; ".join(parts) or "no errors"


RECORD_KEYS = frozenset({"id", "soft_labels", "hard_labels"})
SPAN_KEYS = frozenset({"start", "end", "prob"})


def check_row(row: dict, item: Item, path: str, line: int) -> list[Problem]:
    """The problems of one prediction row for its item (spans, probabilities, labels).

    A run checks each prediction before it records the item as done, so a bad one is never
    resumed past as finished.
    """
    report = CheckReport()
    _check_row(row, item, (path, line), report)
    return report.errors


def _missing_keys(span: object) -> str:
    """What a soft span lacks, and a key of its that looks like it misspelt (`strt` for start)."""
    if not isinstance(span, dict):
        return f" (got {type(span).__name__})"
    missing = sorted(SPAN_KEYS - span.keys())
    said = f" (no {', '.join(missing)}"
    others = [k for k in span if isinstance(k, str) and k not in SPAN_KEYS]
    near = [(k, m) for m in missing if (k := close_match(m, others, cutoff=0.6)) is not None]
    if near:
        said += "; " + ", ".join(f"{k!r} for {m!r}?" for k, m in near)
    return said + ")"


def _first_difference(a: str, b: str) -> str:
    """Where two texts part: `from character 12` or their lengths."""
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"from character {at}; {len(a)} characters against {len(b)}"


def _check_row(row: dict, item: Item, where: tuple[str, int], report: CheckReport) -> None:
    path, line = where
    n = len(item.model_output_text)

    def err(field_name: str, msg: str) -> None:
        report.errors.append(Problem(path, line, field_name, msg, item_id=item.id))

    if "soft_labels" not in row and "hard_labels" not in row:
        err("soft_labels", "neither soft_labels nor hard_labels given" + any_misspelled_label(row))
        return
    text = row.get("model_output_text")
    if isinstance(text, str) and text != item.model_output_text:
        # the scorer reads only the spans, but they were placed on another text; said once
        # for the file (`check_rows`), with the first place
        report.other_texts.append((line, item.id, _first_difference(text, item.model_output_text)))
    soft = row.get("soft_labels", [])
    hard = row.get("hard_labels", [])
    probs = np.zeros(n)
    covered = np.zeros(n, dtype=bool)
    good_soft = isinstance(soft, list)
    if not good_soft:
        err("soft_labels", "must be a list")
        soft = []
    for i, span in enumerate(soft):
        name = f"soft_labels.{i}"
        if not isinstance(span, dict) or not SPAN_KEYS <= span.keys():
            err(name, "must be an object with start, end, prob" + _missing_keys(span))
            good_soft = False
            continue
        start, end, prob = span["start"], span["end"], span["prob"]
        if not (is_json_int(start) and is_json_int(end)):
            err(name, "start and end must be integers")
            good_soft = False
            continue
        fits = 0 <= start < end <= n
        if not fits:
            err(name, f"span [{start}, {end}) must satisfy 0 <= start < end <= {n}")
        if isinstance(prob, bool) or not isinstance(prob, (int, float)) or not 0.0 <= prob <= 1.0:
            # in the file's spelling (`true`, `null`, `"0.5"`), not Python's `True`, `None`
            # said with bad ends too
            err(f"{name}.prob", f"probability {json_shown(prob)} is not a number in [0, 1]")
            fits = False
        if not fits:
            good_soft = False
            continue
        if covered[start:end].any():
            err(name, f"span [{start}, {end}) overlaps an earlier soft span")
        covered[start:end] = True
        probs[start:end] = prob
    if not isinstance(hard, list):
        err("hard_labels", "must be a list")
        return
    hard_mask = np.zeros(n, dtype=bool)
    prev_end = -1
    for i, span in enumerate(hard):
        name = f"hard_labels.{i}"
        if not (isinstance(span, list) and len(span) == 2 and all(is_json_int(v) for v in span)):
            err(name, "must be a pair of integers [start, end]")
            continue
        start, end = span
        if not 0 <= start < end <= n:
            err(name, f"span [{start}, {end}) must satisfy 0 <= start < end <= {n}")
            continue
        if start < prev_end:
            report.warnings.append(
                Problem(path, line, name, "hard spans overlap or are unsorted", item_id=item.id)
            )
        prev_end = max(prev_end, end)
        hard_mask[start:end] = True
    if "soft_labels" in row and good_soft and (hard_mask & (probs <= 0)).any():
        first = int(np.flatnonzero(hard_mask & (probs <= 0))[0])
        err("hard_labels", f"character {first} is in a hard span but has soft probability 0")


def _unknown_keys(rows: list[tuple[int, dict]], path: str) -> list[Problem]:
    """One problem per unknown key (records and soft spans), with how often and where first."""
    seen: dict[tuple[str, str], list[int]] = {}
    for line, row in rows:
        for key in row.keys() - RECORD_KEYS:
            seen.setdefault(("record", key), [line, 0])[1] += 1
        soft = row.get("soft_labels")
        for span in soft if isinstance(soft, list) else []:
            for key in span.keys() - SPAN_KEYS if isinstance(span, dict) else ():
                seen.setdefault(("soft_labels span", key), [line, 0])[1] += 1
    return [
        Problem(
            path,
            first,
            key,
            f"unknown key in {where} ({plural(count, 'time')}); the official scorer ignores it",
        )
        for (where, key), (first, count) in sorted(seen.items(), key=lambda kv: kv[1][0])
    ]


def check_rows(
    rows: Iterable[tuple[int, dict]],
    items: list[Item],
    path: str = "<predictions>",
    strict: bool = False,
    partial: bool = False,
) -> CheckReport:
    """Checks parsed rows: every item id exactly once, spans valid, labels consistent.

    Unknown keys are ignored, as by the official scorer; `strict` makes each an error.
    `partial` accepts a file that predicts only some of the items (a `--limit` run, as
    `score --partial` scores one): the items it lacks are listed in `missing`, not an error.
    """
    rows = list(rows)
    report = CheckReport()
    if strict:
        report.errors.extend(_unknown_keys(rows, path))
    by_id = {item.id: item for item in items}
    seen: dict[str, int] = {}
    for line, row in rows:
        report.n_lines += 1
        rid = row.get("id")
        if not isinstance(rid, str):
            report.errors.append(Problem(path, line, "id", "missing or not a string"))
            continue
        if rid in seen:
            report.errors.append(duplicate_id(path, line, rid, seen[rid]))
            continue
        seen[rid] = line
        if rid not in by_id:
            report.errors.append(unknown_id(path, line, rid, by_id))
            report.unknown_ids += 1
            continue
        _check_row(row, by_id[rid], (path, line), report)
    if report.other_texts:
        line, item_id, where = report.other_texts[0]
        report.warnings.append(
            Problem(
                path,
                line,
                "model_output_text",
                f"differs from the item's answer ({where}) on {plural(len(report.other_texts), 'line')}: "
                "spans of another file, or of answers edited since?",
                item_id=item_id,
            )
        )
    if len(seen) > 1 and not any(row.get("soft_labels") or row.get("hard_labels") for _, row in rows):
        report.warnings.append(Problem(path, None, None, marks_nothing(len(seen))))
    empty = [rid for rid in seen if rid in by_id and not by_id[rid].model_output_text]
    if empty:
        report.warnings.append(Problem(path, None, None, empty_answers(empty)))
    report.warnings += [Problem(path, None, None, message) for message in misspelled_on_every_line(rows)]
    by_line = dict(rows)
    for line, key, have in labels_missing_on_some_lines(rows):
        row = by_line[line]
        message = (
            f"missing while {plural(have, 'other line')} {'has' if have == 1 else 'have'} it"
            f"{misspelled_label(row, key)}; the official scorer fails on such a file"
        )
        item_id = row.get("id") if isinstance(row.get("id"), str) else None
        report.errors.append(Problem(path, line, key, message, item_id=item_id))
    report.n_items = len(items)
    report.missing = [item.id for item in items if item.id not in seen]
    if partial and items and not seen:  # --partial accepts some items, not none
        report.errors.append(Problem(path, None, "id", f"no prediction for any of the {len(items)} items"))
    elif report.missing and not partial:
        hint = " (check --partial accepts a file made on some of the items, e.g. with --limit)"
        report.errors.append(Problem(path, None, "id", no_prediction(report.missing) + hint))
    return report


def check_file(
    path: str | Path, items: list[Item], strict: bool = False, partial: bool = False
) -> CheckReport:
    """Checks a prediction JSONL file; unreadable lines are errors too."""
    from mushroom.data.jsonl import OFFICIAL_BOM, starts_with_bom
    from mushroom.data.jsonnum import ujson_float, ujson_int

    problems: list[Problem] = []
    # an upload the official scorer cannot read; said on line 1, where the mark is, and not
    # counted as one more line read
    bom = [Problem(str(path), 1, None, f"the file {OFFICIAL_BOM}")] if starts_with_bom(Path(path)) else []
    # numbers read as the official scorer reads them: one it cannot hold fails the upload
    rows = list(iter_json_lines(Path(path), problems, parse_float=ujson_float, parse_int=ujson_int))
    report = check_rows(rows, items, str(path), strict, partial)
    if problems and not rows:  # a gzip, UTF-16 or JSON array: "no prediction for" every item hid why
        report.errors = [e for e in report.errors if not e.message.startswith("no prediction for")]
        report.missing = []
    report.n_lines += len({p.line for p in problems if p.line is not None})  # unreadable lines were read too
    # in file order: unreadable lines were listed before the rest (5, 6, 7, 8, then 4)
    report.errors = sorted(bom + problems + report.errors, key=lambda p: (p.line is None, p.line or 0))
    return report
