"""Reading gold and prediction files for scoring, with the official scorer's rules.

The official scorer derives missing labels per *file*: a prediction file with no
`hard_labels` anywhere gets them from its soft labels (prob > 0.5, touching spans merged),
one with no `soft_labels` anywhere gets soft spans of prob 1.0 from its hard labels. A file
that has both columns but lacks one on some line makes the official scorer crash (pandas
fills NaN); mushroom derives that line's labels the same way and records a warning.
Numbers are parsed like pandas' ujson (see jsonnum), so ties and ranks match exactly.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mushroom.data.jsonl import OFFICIAL_BOM, iter_json_lines, starts_with_bom
from mushroom.data.jsonnum import ujson_float, ujson_int
from mushroom.data.languages import language_code
from mushroom.errors import DataError, Problem, duplicate_id, near_id
from mushroom.util.words import clipped, close_match, listed, no_prediction, plural


@dataclass
class ScoringRecord:
    """The fields the metrics need, in plain Python types."""

    id: str
    soft: list[tuple[int, int, float]]
    hard: list[tuple[int, int]]
    text_len: int | None = None
    lang: str | None = None
    line: int | None = None
    soft_derived: bool = False


@dataclass
class ScoringFile:
    """A loaded file and what had to be derived or would trouble the official scorer."""

    path: Path
    records: dict[str, ScoringRecord]
    warnings: list[str] = field(default_factory=list)


def marks_nothing(n: int) -> str:
    """The warning for a file of predictions none of which marks a character.

    Valid, and it scores, but a run that failed and wrote its items empty, or a detector
    that had no contexts, looks exactly like it: said rather than scored in silence.
    """
    return (
        f"none of its {n} predictions marks anything (no soft or hard span): a run whose items "
        "failed or had no contexts looks like this"
    )


EMPTY_ANSWER = "with an empty answer"
"""In the warning of `empty_answers`, which a run's table of scores repeats."""


def empty_answers(ids: list[str]) -> str:
    """The warning for items with an empty answer: the official scorer's Cor of each is NaN.

    scipy's `spearmanr` of two empty lists is NaN, so the file's mean Cor is NaN too; kept,
    as the official number, and said.
    """
    return (
        f"{plural(len(ids), 'item')} {EMPTY_ANSWER} (first: {ids[0]}): the official scorer "
        "gives each Cor NaN, and so the mean Cor is NaN"
    )


def official_hard_from_soft(soft: list[tuple[int, int, float]]) -> list[tuple[int, int]]:
    """Hard labels the official scorer derives: prob > 0.5, spans that touch merged."""
    hard: list[list[int]] = []
    prev_end = -1
    for start, end, prob in sorted(soft, key=lambda s: (s[0], s[1])):
        if not prob > 0.5:
            continue
        if start == prev_end:
            hard[-1][1] = end
        else:
            hard.append([start, end])
        prev_end = end
    return [(s, e) for s, e in hard]


def is_json_int(value: Any) -> bool:
    """An integer in JSON terms: bool is an int subclass in Python but not a JSON number."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value: object) -> bool:
    """A JSON number: an int or float, not a bool (True is an int to Python)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_shown(value: Any) -> str:
    """A value as its file wrote it (true, null, "0.5"), cut to a readable length.

    A float is read as the official scorer reads it (`ujson_float`), which can be a bit off
    Python's: its file's `1.7` is 1.7000000000000002 and was shown so, a number the user
    could not find in the file. The shortest spelling that reads back the same is shown.
    """
    if isinstance(value, float) and math.isfinite(value):
        for digits in (15, 16, 17):
            spelt = format(value, f".{digits}g")
            try:
                if ujson_float(spelt) == value:
                    return clipped(spelt, 40)
            except ValueError:
                break
    return clipped(json.dumps(value, ensure_ascii=False), 40)


def _parse_soft(raw: Any, where: Problem, problems: list[Problem]) -> list | None:
    """Soft spans as (start, end, prob); `where` locates the line (its field is set per problem)."""
    if not isinstance(raw, list):
        problems.append(replace(where, field="soft_labels", message="must be a list of {start, end, prob}"))
        return None
    out = []
    for i, span in enumerate(raw):
        if not isinstance(span, dict) or not {"start", "end", "prob"} <= span.keys():
            problems.append(replace(where, field=f"soft_labels.{i}", message="needs keys start, end, prob"))
            continue
        wrong = [
            (key, want)
            for key, want, ok in (
                ("start", "an integer", is_json_int(span["start"])),
                ("end", "an integer", is_json_int(span["end"])),
                ("prob", "a number", _is_num(span["prob"])),
            )
            if not ok
        ]
        if wrong:  # each named: "start/end must be integers, prob a number" left the reader to find it
            problems += [
                replace(
                    where, field=f"soft_labels.{i}.{key}", message=f"{json_shown(span[key])} is not {want}"
                )
                for key, want in wrong
            ]
            continue
        out.append((span["start"], span["end"], span["prob"]))
    return out


def _parse_hard(raw: Any, where: Problem, problems: list[Problem]) -> list | None:
    """Hard spans as (start, end); `where` locates the line."""
    if not isinstance(raw, list):
        problems.append(replace(where, field="hard_labels", message="must be a list of [start, end]"))
        return None
    out = []
    for i, span in enumerate(raw):
        if not (isinstance(span, list) and len(span) == 2 and all(is_json_int(v) for v in span)):
            got = json_shown(span)
            problems.append(
                replace(where, field=f"hard_labels.{i}", message=f"must be [start, end] integers, not {got}")
            )
            continue
        out.append((span[0], span[1]))
    return out


LABEL_KEYS = ("soft_labels", "hard_labels")


def misspelled_label(row: Collection[Any], key: str) -> str:
    """' (is 'soft_label' a misspelling?)' when the line has a key close to the missing `key`.

    `row` is the line, or its keys alone (`LineKeys`): only its keys are looked at.
    """
    others = [k for k in row if isinstance(k, str) and k not in LABEL_KEYS]
    close = close_match(key, others, cutoff=0.75)
    return f" (is {close!r} a misspelling?)" if close else ""


def any_misspelled_label(row: Collection[Any]) -> str:
    """`misspelled_label` for the first label key the line lacks, or "".

    Other keys are kept or ignored, so `hard_label` was too, and the line read as marking
    nothing.
    """
    return next((hint for key in LABEL_KEYS if key not in row and (hint := misspelled_label(row, key))), "")


def misspelled_on_every_line(rows: Sequence[tuple[int, Collection[str]]]) -> list[str]:
    """A message for each label key no line has, where lines have a key close to it.

    Each such line is valid alone (the other label is there), so nothing else says it: the
    official scorer ignores `hard_label` and derives the hard labels from the soft ones, and
    the file scored other than the labels its writer meant (an audit: IoU 0.31, not 0.35).
    """
    said = []
    for key in LABEL_KEYS:
        if not rows or any(key in row for _, row in rows):
            continue
        close = [(line, hint) for line, row in rows if (hint := misspelled_label(row, key))]
        if close:
            derived = "from soft_labels above 0.5" if key == "hard_labels" else "at 1.0 over hard_labels"
            said.append(
                f"no line has {key}; {plural(len(close), 'line')} (first line {close[0][0]}) "
                f"{'has' if len(close) == 1 else 'have'} a key like it{close[0][1]}: the official "
                f"scorer ignores that key and derives {key} {derived}"
            )
    return said


def labels_missing_on_some_lines(rows: Sequence[tuple[int, Collection[str]]]) -> list[tuple[int, str, int]]:
    """(line, key, lines that have the key) for each label key a line lacks that others have.

    The official scorer reads a file as a table, so such a line becomes a missing value and
    the scorer fails, though each line alone is valid: `score` warns of it, `check` fails it.
    """
    have = {key: sum(key in row for _, row in rows) for key in LABEL_KEYS}
    return [(line, key, n) for key, n in have.items() if n for line, row in rows if key not in row]


class LineKeys:
    """The keys of each line read, without its values: what the file-wide checks need.

    Those checks (a label key some lines lack, a key misspelt on every line) look at keys only,
    so a file is read a line at a time and each line dropped once read; a gold line holds its
    answer, tokens and logits (about 18 KB a val item), which were all held till the end.
    Lines with the same keys share one tuple.
    """

    def __init__(self) -> None:
        self.lines: list[tuple[int, tuple[str, ...]]] = []
        self._shared: dict[tuple[str, ...], tuple[str, ...]] = {}

    def add(self, line: int, row: Mapping[Any, Any]) -> None:
        keys = tuple(k for k in row if isinstance(k, str))
        self.lines.append((line, self._shared.setdefault(keys, keys)))

    def any_has(self, key: str) -> bool:
        return any(key in keys for keys in self._shared)


def read_scoring_file(path: str | Path, is_gold: bool, collect: list[Problem] | None = None) -> ScoringFile:
    """Loads a gold or prediction file for scoring; raises DataError listing every problem.

    With `collect`, the problems go there instead and the file comes back with the lines that
    were read, so that a caller can add the problems only pairing finds (a span past the end
    of its answer) and say them all at once. Only the fields scoring needs are kept of a line.
    """
    path = Path(path)
    problems: list[Problem] = []  # the file's own, then each line's (`on_lines`), as it was said
    on_lines: list[Problem] = []
    lines = LineKeys()
    records: dict[str, ScoringRecord] = {}
    first_line: dict[str, int] = {}
    numbered: list[tuple[int, Any]] = []  # lines whose id is a number; all of them is a file's problem
    for lineno, row in iter_json_lines(path, problems, parse_float=ujson_float, parse_int=ujson_int):
        lines.add(lineno, row)
        if _is_num(row.get("id")):
            numbered.append((lineno, row["id"]))
        _read_record(path, lineno, row, is_gold, records, first_line, on_lines)
    n_rows = len(lines.lines)
    has_hard, has_soft = lines.any_has("hard_labels"), lines.any_has("soft_labels")
    warnings: list[str] = []
    if n_rows and not has_hard and not has_soft:
        unlabelled = is_gold and lines.any_has("model_output_text")
        problems.append(
            Problem(
                str(path),
                None,
                None,
                "no line has hard_labels or soft_labels"
                + next((hint for _, keys in lines.lines if (hint := any_misspelled_label(keys))), "")
                + (
                    ": items without gold labels (an unlabelled split such as test) cannot be scored; "
                    "score val, or a labelled file of your own"
                    if unlabelled
                    else ""
                ),
            )
        )
        if unlabelled:  # said alone: the train split's lines have no ids, one more problem each
            if collect is not None:
                collect += problems
                return ScoringFile(path=path, records={}, warnings=[])
            raise DataError(problems)
    if numbered and len(numbered) == n_rows:
        # The task's own sample_set.v1.json numbers its ids: one line for all, with the way out
        problems.append(_numbered_ids(path, numbered))
        on_lines, records = [], {}
    problems += on_lines
    missing: dict[int, list[str]] = {}
    for line, key, _ in labels_missing_on_some_lines(lines.lines):
        missing.setdefault(line, []).append(key)
    if missing:
        by_line = dict(lines.lines)
        hint = next(
            (h for ln, ks in missing.items() for k in ks if (h := misspelled_label(by_line[ln], k))), ""
        )
        neither = [line for line in missing if not any(k in by_line[line] for k in LABEL_KEYS)]
        parts = []
        if len(missing) > len(neither):
            one = plural(len(missing) - len(neither), "line")
            parts.append(f"{one} without hard_labels or soft_labels while others have them (derived)")
        if neither:
            one = plural(len(neither), "line")
            parts.append(
                f"{one} with neither, scored as "
                + ("marking no span" if is_gold else "predicting no span")
                + f" (line {neither[0]})"
            )
        warnings.append(f"{path}: {'; '.join(parts)}{hint}; the official scorer fails on such a file")
    if not is_gold:  # a gold file lacking a kind is said below: the official scorer fails on it
        warnings += [f"{path}: {message}" for message in misspelled_on_every_line(lines.lines)]
    if is_gold and n_rows and has_hard != has_soft:  # it takes both columns of a gold file
        lacking, other = ("soft_labels", "hard") if has_hard else ("hard_labels", "soft")
        hint = next((h for _, keys in lines.lines if (h := misspelled_label(keys, lacking))), "")
        warnings.append(
            f"{path}: no line has {lacking}{hint}: the official scorer fails on such a gold file; scored "
            f"with them derived from the {other} labels"
        )
    if starts_with_bom(path):
        warnings.append(f"{path}: {OFFICIAL_BOM}")
    if is_gold and n_rows and not lines.any_has("model_output_text"):
        # no line is a gold line: most likely the two files were given the other way round
        problems = [p for p in problems if p.field != "model_output_text"] + [
            Problem(
                str(path),
                None,
                "model_output_text",
                f"missing on all {n_rows} lines: is this the gold file? "
                "(`mushroom score GOLD PRED`: gold first)",
            )
        ]
    if problems and collect is None:
        raise DataError(problems)
    if collect is not None:
        collect += problems
    return ScoringFile(path=path, records=records, warnings=warnings)


def _numbered_ids(path: Path, numbered: list[tuple[int, Any]]) -> Problem:
    """One problem for a file whose ids are all numbers, with a command that mends it."""
    n, rid = numbered[0]
    fixed = path.with_name(f"{path.stem}.str-ids.jsonl")
    fix = (
        "python3 -c \"import json,sys; [print(json.dumps({**r, 'id': str(r['id'])}, ensure_ascii=False)) "
        'for r in map(json.loads, open(sys.argv[1]))]" '
        f"{shlex.quote(str(path))} > {shlex.quote(str(fixed))}"
    )
    return Problem(
        str(path),
        None,
        "id",
        f"ids are numbers ({plural(len(numbered), 'line')}, e.g. line {n}: {rid!r}); mushroom "
        f"matches ids as text: write them as strings, in both files, e.g. {fix}",
    )


def _read_record(
    path: Path,
    lineno: int,
    row: dict[str, Any],
    is_gold: bool,
    records: dict[str, ScoringRecord],
    first_line: dict[str, int],
    problems: list[Problem],
) -> None:
    """Adds one line's record to `records`, or its problems to `problems`."""
    rid = row.get("id")
    if not isinstance(rid, str) or not rid:
        got = "missing" if rid is None else f"not a string (got {type(rid).__name__} {rid!r})"
        problems.append(Problem(str(path), lineno, "id", got if rid != "" else "empty"))
        return
    if rid in first_line:
        problems.append(duplicate_id(path, lineno, rid, first_line[rid]))
        return
    first_line[rid] = lineno
    where = Problem(str(path), lineno, None, "", item_id=rid)
    soft = _parse_soft(row["soft_labels"], where, problems) if "soft_labels" in row else None
    hard = _parse_hard(row["hard_labels"], where, problems) if "hard_labels" in row else None
    if ("soft_labels" in row and soft is None) or ("hard_labels" in row and hard is None):
        return
    if hard is None:
        hard = official_hard_from_soft(soft or [])
    soft_derived = soft is None
    if soft is None:
        soft = [(s, e, 1.0) for s, e in hard]
    text_len = None
    if is_gold:
        text = row.get("model_output_text")
        if not isinstance(text, str):
            said = "missing in gold file" if text is None else f"not a string (got {type(text).__name__})"
            problems.append(Problem(str(path), lineno, "model_output_text", said, item_id=rid))
            return
        text_len = len(text)
    lang = row.get("lang")
    records[rid] = ScoringRecord(
        id=rid,
        soft=soft,
        hard=hard,
        text_len=text_len,
        lang=language_code(lang) if isinstance(lang, str) else None,
        line=lineno,
        soft_derived=soft_derived,
    )


def match_ids(gold: ScoringFile, pred: ScoringFile, partial: bool = False) -> list[str]:
    """Ids sorted as the official scorer sorts them; any mismatch is an error.

    With `partial` (a run made on the first N items of each language), gold ids with no
    prediction are left out instead: the ids scored are those predicted. Ids not in the gold
    file are errors either way.
    """
    missing = [] if partial else sorted(set(gold.records) - set(pred.records))
    extra = sorted(set(pred.records) - set(gold.records))
    if gold.records and not pred.records:
        raise DataError([Problem(str(pred.path), None, None, "the file holds no prediction")])
    if gold.records and pred.records and len(extra) == len(pred.records):
        # not one id in common: a file of another language or split, which --partial cannot mend
        raise DataError(
            [
                Problem(
                    str(pred.path),
                    None,
                    "id",
                    f"none of its {plural(len(extra), 'id')} is in the gold file {gold.path} "
                    f"(its first {extra[0]!r}, the gold's {min(gold.records)!r}): are the two files "
                    "of the same language and split?",
                )
            ]
        )
    problems = []
    if missing:
        problems.append(
            Problem(
                str(pred.path),
                None,
                "id",
                no_prediction(missing, "gold id"),
            )
        )
    if extra:
        problems.append(
            Problem(
                str(pred.path),
                # the first stranger in the file, to find it by (in-memory records have no line)
                min((line for r in extra if (line := pred.records[r].line) is not None), default=None),
                "id",
                f"{plural(len(extra), 'id')} not in the gold file: {listed(extra)}"
                + near_id(extra[0], gold.records),  # an NFD or padded id looks equal on screen
            )
        )
    if problems:
        raise DataError(problems)
    return sorted(set(gold.records) & set(pred.records)) if partial else sorted(gold.records)
