"""Scoring prediction files against gold files: per item, per language, overall."""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from mushroom.data.label_files import (
    ScoringFile,
    ScoringRecord,
    empty_answers,
    marks_nothing,
    match_ids,
    read_scoring_file,
)
from mushroom.data.splits import lang_from_filename, split_tag
from mushroom.errors import DataError, MushroomError, Problem
from mushroom.evaluation.metrics import OfficialScorerCrash, char_vector, item_cor, item_iou, soft_fits
from mushroom.evaluation.stats import bootstrap_ci
from mushroom.util.files import missing_reason
from mushroom.util.words import plural


@dataclass
class ScoreResult:
    """Per-item scores in the official order (gold ids sorted), and what was noticed."""

    ids: list[str]
    langs: list[str]
    iou: np.ndarray
    cor: np.ndarray
    warnings: list[str] = field(default_factory=list)
    unscored: int = 0  # gold items left out because the run did not predict them (partial scoring)

    def __repr__(self) -> str:
        # the default listed every id and score: thousands of lines in a notebook
        langs = ",".join(sorted(set(self.langs)))
        return (
            f"ScoreResult(n={len(self.ids)}, iou={self.mean_iou:.4f}, cor={self.mean_cor:.4f}, "
            f"langs={langs}, unscored={self.unscored}, warnings={len(self.warnings)})"
        )

    @property
    def n_gold(self) -> int:
        """Gold items of the files scored: those scored plus those a partial run left out."""
        return len(self.ids) + self.unscored

    @classmethod
    def concat(cls, parts: list[ScoreResult]) -> ScoreResult:
        """One result of several (e.g. per-language) results, items in order."""
        return cls(
            ids=[i for r in parts for i in r.ids],
            langs=[lang for r in parts for lang in r.langs],
            iou=np.concatenate([r.iou for r in parts]),
            cor=np.concatenate([r.cor for r in parts]),
            warnings=[w for r in parts for w in r.warnings],
            unscored=sum(r.unscored for r in parts),
        )

    @property
    def mean_iou(self) -> float:
        """The mean IoU over the items: the official scorer's `IoU:` line (nan with none)."""
        return float(self.iou.mean()) if self.iou.size else float("nan")

    @property
    def mean_cor(self) -> float:
        """The mean Spearman correlation over the items: the official scorer's `Cor:` line."""
        return float(self.cor.mean()) if self.cor.size else float("nan")

    def official_lines(self) -> str:
        """The two lines the official scorer writes."""
        return f"IoU: {self.mean_iou:.8f}\nCor: {self.mean_cor:.8f}"

    def subset(self, idx: list[int]) -> ScoreResult:
        """The scores of the chosen items, in the given order (warnings are not carried)."""
        return ScoreResult(
            ids=[self.ids[i] for i in idx],
            langs=[self.langs[i] for i in idx],
            iou=self.iou[idx],
            cor=self.cor[idx],
        )

    def of_langs(self, langs: list[str]) -> ScoreResult:
        """The scores of the items in any of these languages."""
        return self.subset([i for i, lang in enumerate(self.langs) if lang in langs])

    def by_lang(self) -> dict[str, ScoreResult]:
        """One result per language, sorted (the leaderboard ranks per language)."""
        groups: dict[str, list[int]] = {}
        for i, lang in enumerate(self.langs):
            groups.setdefault(lang, []).append(i)
        return {lang: self.subset(idx) for lang, idx in sorted(groups.items())}

    def ci(self, seed: int = 0) -> dict[str, tuple[float, float]]:
        """Bootstrap 95% intervals of both means, over items: {"iou": (lo, hi), "cor": (lo, hi)}."""
        return {"iou": bootstrap_ci(self.iou, seed=seed), "cor": bootstrap_ci(self.cor, seed=seed)}

    def to_dict(self, with_items: bool = False) -> dict:
        """n, means and intervals as plain numbers (nan where undefined); `with_items` adds each item's."""
        ci = self.ci()
        out: dict = {
            "n": len(self.ids),
            "iou": self.mean_iou,
            "cor": self.mean_cor,
            "iou_ci95": list(ci["iou"]),
            "cor_ci95": list(ci["cor"]),
        }
        if with_items:
            out["items"] = [
                {"id": i, "lang": lang, "iou": float(a), "cor": float(b)}
                for i, lang, a, b in zip(self.ids, self.langs, self.iou, self.cor)
            ]
        return out


@dataclass(frozen=True)
class Quirk:
    """A kind of input the official scorer takes without a word: its names and what it does."""

    one: str
    many: str
    effect: str


REVERSED = Quirk("reversed span", "reversed spans", "scored as empty")
# `check` and `ensemble` refuse it; most often an end taken as inclusive, or a lost span
EMPTY = Quirk("empty span", "empty spans", "marks nothing")
OUT_OF_RANGE = Quirk("probability outside [0, 1]", "probabilities outside [0, 1]", "ranked as given")
NEGATIVE = Quirk("negative span start", "negative span starts", "index from the end")
OUTSIDE = Quirk("hard span outside the answer", "hard spans outside the answer", "counted in the IoU union")
# `check` refuses it: hard labels that mark what the soft labels call certainly fine
UNBACKED = Quirk(
    "hard span over characters of soft probability 0",
    "hard spans over characters of soft probability 0",
    "IoU and Cor judge these characters as opposite answers",
)
OVERLAP = Quirk(
    "soft span overlapping an earlier one",
    "soft spans overlapping earlier ones",
    "the later span's probability counts where they overlap",
)


def _overlapping(spans: list[tuple[int, int, float]]) -> list[int]:
    """Indices of non-empty spans that overlap a span listed before them.

    The spans before each one are kept as their union, sorted disjoint runs: a span overlaps
    one of them when it meets a run. A sweep that stepped once per overlapping pair took a
    minute on 40,000 spans over one character, where the official scorer takes seconds.
    """
    from bisect import bisect_right

    found: list[int] = []
    starts: list[int] = []  # the union of the spans so far: runs [starts[k], ends[k])
    ends: list[int] = []
    for i, (start, end, _) in enumerate(spans):
        if start >= end:
            continue
        k = bisect_right(ends, start)  # the first run that ends after this span starts
        if k < len(starts) and starts[k] < end:
            found.append(i)
        j = bisect_right(starts, end)  # runs k..j-1 meet or touch it: merged into one
        lo = min(start, starts[k]) if k < j else start
        hi = max(end, ends[j - 1]) if k < j else end
        starts[k:j], ends[k:j] = [lo], [hi]
    return found


def _unbacked_hard(
    soft: list[tuple[int, int, float]], hard: list[tuple[int, int]], n: int
) -> tuple[int, int] | None:
    """The first hard span (index, character) over a character the soft labels give 0, if any.

    Hard spans outside the answer or reversed are said by their own quirks; a later soft
    span's probability wins where they overlap, as the official scorer paints them.
    """
    if not soft_fits(soft, n):  # a span past the answer: refused by `score` before this
        return None
    probs = char_vector(soft, n)  # as the official scorer paints them, negative indices included
    for i, (start, end) in enumerate(hard):
        if 0 <= start < end <= n:
            zero = np.flatnonzero(probs[start:end] <= 0)
            if zero.size:
                return i, start + int(zero[0])
    return None


def _quirks(gold: ScoringFile, pred: ScoringFile, ids: list[str]) -> list[str]:
    """What the official scorer accepts without a word but that changes or hides a number.

    Reversed or empty spans count as empty, hard spans past the answer still count in the
    union, probabilities outside [0, 1] are ranked as they are. The scores keep the official
    values; these are warnings, one per kind and file with the first few places. The gold
    file is read as the predictions are: a gold file made by hand (`detect --items` labels)
    moves the numbers as much.
    """
    said_of_gold = _file_quirks(gold, gold, ids)
    same = pred.path == gold.path and all(  # `score F F`: each said once
        (pred.records[r].soft, pred.records[r].hard) == (gold.records[r].soft, gold.records[r].hard)
        for r in ids
    )
    if same:
        return said_of_gold
    return said_of_gold + _file_quirks(pred, gold, ids)


def _file_quirks(scored: ScoringFile, gold: ScoringFile, ids: list[str]) -> list[str]:
    """`_quirks` of one file's records, each answer's length from the gold file."""
    found: dict[Quirk, list[str]] = {}

    def note(kind: Quirk, rec: ScoringRecord, field_name: str, detail: str) -> None:
        where = scored.path if rec.line is None else f"{scored.path}:{rec.line}"  # in memory: no line
        found.setdefault(kind, []).append(f"{where}: id {rec.id!r}: {field_name} {detail}")

    for rid in ids:
        rec, n = scored.records[rid], gold.records[rid].text_len or 0
        soft = [] if rec.soft_derived else rec.soft
        for i, (start, end, prob) in enumerate(soft):
            if start > end:
                note(REVERSED, rec, f"soft_labels.{i}", f"[{start}, {end})")
            elif start == end:
                note(EMPTY, rec, f"soft_labels.{i}", f"[{start}, {end})")
            if not 0.0 <= prob <= 1.0:
                note(
                    OUT_OF_RANGE, rec, f"soft_labels.{i}.prob", f"{prob:.15g}"
                )  # as written: the scorer's ujson reading adds digits
            if start < 0:
                note(NEGATIVE, rec, f"soft_labels.{i}", f"[{start}, {end})")
        for i in _overlapping(soft):
            note(OVERLAP, rec, f"soft_labels.{i}", f"[{soft[i][0]}, {soft[i][1]})")
        for i, (start, end) in enumerate(rec.hard):
            if start > end:
                note(REVERSED, rec, f"hard_labels.{i}", f"[{start}, {end})")
            elif start == end:
                note(EMPTY, rec, f"hard_labels.{i}", f"[{start}, {end})")
            elif start < 0 or end > n:
                answer = plural(n, "character")
                note(OUTSIDE, rec, f"hard_labels.{i}", f"[{start}, {end}) in an answer of {answer}")
        if not soft:  # no soft labels, or derived from the hard ones: nothing to disagree with
            continue
        unbacked = _unbacked_hard(soft, rec.hard, n)
        if unbacked is not None:
            note(UNBACKED, rec, f"hard_labels.{unbacked[0]}", f"(character {unbacked[1]})")
    out = []
    for kind, places in found.items():
        more = f" and {len(places) - 3} more" if len(places) > 3 else ""
        what = plural(len(places), kind.one, kind.many)
        out.append(
            f"{scored.path}: {what} ({kind.effect}); the official scorer accepts this silently: "
            + "; ".join(places[:3])
            + more
        )
    return out


def score_loaded(
    gold: ScoringFile, pred: ScoringFile, lang: str | None = None, partial: bool = False
) -> ScoreResult:
    """Scores two loaded files item by item.

    Args:
        gold: the gold file.
        pred: the predictions.
        lang: the items' language when the gold records do not say.
        partial: score only the gold items predicted (a run made with `--limit`); the
            others are counted in `unscored`, so the caller can say what was left out.
    """
    if not gold.records:  # scored as IoU nan, or as "ids not in the gold file" beside predictions
        raise DataError.single(gold.path, None, None, "no items: the gold file is empty")
    ids = match_ids(gold, pred, partial)
    ious = np.empty(len(ids))
    cors = np.empty(len(ids))
    problems: list[Problem] = []
    for k, rid in enumerate(ids):
        g, p = gold.records[rid], pred.records[rid]
        n = g.text_len or 0
        ious[k] = item_iou(g.hard, p.hard, n)
        try:
            cors[k] = item_cor(g.soft, p.soft, n)
        except OfficialScorerCrash as exc:
            # the gold file's own span may be the one past the end: named where it is
            bad = gold if not soft_fits(g.soft, n) else pred
            line = g.line if bad is gold else p.line
            problems.append(Problem(str(bad.path), line, "soft_labels", str(exc), item_id=rid))
    if problems:
        raise DataError(problems)
    file_lang = lang or lang_from_filename(gold.path) or "all"
    langs = [gold.records[r].lang or file_lang for r in ids]
    warnings = gold.warnings + pred.warnings + _quirks(gold, pred, ids)
    if len(ids) > 1 and not any(pred.records[r].soft or pred.records[r].hard for r in ids):
        warnings.append(f"{pred.path}: {marks_nothing(len(ids))}")
    empty = [r for r in ids if not gold.records[r].text_len]
    if empty:
        warnings.append(f"{gold.path}: {empty_answers(empty)}")
    return ScoreResult(ids, langs, ious, cors, warnings=warnings, unscored=len(gold.records) - len(ids))


def read_and_score(
    gold_path: str | Path, pred_path: str | Path, lang: str | None = None, partial: bool = False
) -> ScoreResult:
    """Reads a gold and a prediction file and scores them (see `score_loaded`).

    Every problem is said at once: those of reading both files, and those only pairing finds
    (a span past the end of its answer) on the lines that were read. The latter were said
    only on a second run, after the first was mended (an audit).
    """
    problems: list[Problem] = []
    gold = read_scoring_file(gold_path, True, problems)
    pred = read_scoring_file(pred_path, False, problems)
    if not problems:
        return score_loaded(gold, pred, lang, partial)
    # a line dropped for its own problem is not one more id "not in the gold file", or missing
    unread = {p.item_id for p in problems if p.item_id is not None}
    pred = replace(pred, records={k: r for k, r in pred.records.items() if k not in unread})
    if gold.records and pred.records:
        try:
            score_loaded(gold, pred, lang, partial=True)
        except DataError as exc:
            problems += [p for p in exc.problems if p not in problems]
    order = {path: k for k, path in enumerate(dict.fromkeys(p.path for p in problems))}
    raise DataError(sorted(problems, key=lambda p: (order[p.path], p.line or 0)))


def score_files(gold_path: str | Path, pred_path: str | Path) -> ScoreResult:
    """Scores one prediction file against one gold file, exactly as the official scorer."""
    return read_and_score(gold_path, pred_path)


@dataclass
class Pairing:
    """Which per-language files were matched, and what was left out (for the user to see)."""

    pairs: list[tuple[str, Path, Path]]
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    unnamed: list[Path] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # languages with both files, not in --langs

    def summary(self) -> list[str]:
        """Lines saying what was scored and what was not."""
        lines = [
            f"scoring {plural(len(self.pairs), 'language')}: "
            + ", ".join(f"{g} ({p.name})" for g, _, p in self.pairs)
        ]
        if self.missing:
            lines.append(f"not scored, no prediction file: {', '.join(self.missing)}")
        if self.extra:
            lines.append(f"not scored, no gold file: {', '.join(self.extra)}")
        if self.left_out:
            lines.append(f"not scored, left out by --langs: {', '.join(self.left_out)}")
        if self.unnamed:
            names = ", ".join(p.name for p in self.unnamed[:5])
            lines.append(f"ignored, no language in the file name (e.g. mushroom.en-val.v2.jsonl): {names}")
        return lines


RUN_LISTS = frozenset({"failures.jsonl"})
"""Files a run folder keeps beside its predictions that are no prediction file (not said as ignored)."""


def require_path(name: str, path: Path) -> None:
    """Raises, naming the argument, for a GOLD or PRED path that is not there."""
    if not path.exists():
        raise MushroomError(f"{name} {path}: {missing_reason(path)}")


def files_by_lang(folder: Path, tag: str | None = None) -> tuple[dict[str, Path], list[Path]]:
    """A folder's per-language files by language, and its .jsonl files named for none.

    With `tag` (val, tst), only the files of that split: a folder may hold a run's val and
    test files side by side.

    Raises:
        MushroomError: two files of one language (which one is meant cannot be told).
    """
    by_lang: dict[str, list[Path]] = {}
    unnamed: list[Path] = []
    for path in sorted(folder.glob("*.jsonl")):
        if tag is not None and split_tag(path) not in (tag, None):
            continue
        lang = lang_from_filename(path)
        if lang is None:
            if path.name not in RUN_LISTS:
                unnamed.append(path)
            continue
        by_lang.setdefault(lang, []).append(path)
    for lang, paths in by_lang.items():
        if len(paths) > 1:  # each named: a third was left out of "two files"
            names = ", ".join(p.name for p in paths[:-1]) + f" and {paths[-1].name}"
            raise MushroomError(
                f"{folder}: {len(paths)} files for language {lang!r}: {names}; "
                "keep one (or move the others to another folder)"
            )
    return {lang: paths[0] for lang, paths in by_lang.items()}, unnamed


def by_gold_file(
    ids: Sequence[object], gold: Path, where: Callable[[int], tuple[str, int | None]]
) -> dict[Path, list[int]]:
    """The indexes of `ids` grouped by the file of the gold folder that has each id.

    Records in memory or in a saved dataset are paired with a gold folder's per-language
    files by id, so that `score` pairs them as it pairs the official files. An id in two
    gold files goes to the first; a bad gold line is passed over (the scorer says what is
    wrong with it).

    Args:
        ids: the records' ids, in order.
        gold: the gold folder.
        where: the path and line to blame for the k-th record when its id is in no file.

    Raises:
        DataError: one problem per id that no gold file has.
    """
    from mushroom.data.jsonl import iter_json_lines

    file_of: dict[str, Path] = {}
    for path in files_by_lang(gold)[0].values():
        for _, row in iter_json_lines(path, []):
            if isinstance(row.get("id"), str):
                file_of.setdefault(row["id"], path)
    grouped: dict[Path, list[int]] = {}
    strays: list[Problem] = []
    for k, item_id in enumerate(ids):
        path = file_of.get(item_id) if isinstance(item_id, str) else None
        if path is None:
            strays.append(Problem(*where(k), "id", f"{item_id!r} is in no gold file of {gold}"))
        else:
            grouped.setdefault(path, []).append(k)
    if strays:
        raise DataError(strays)
    return grouped


def pair_paths(
    gold: Path, pred: Path, langs: list[str] | None = None, allow_missing: bool = False, role: str = "PRED"
) -> Pairing:
    """(lang, gold file, prediction file) for a file pair or two folders matched by language.

    Args:
        gold: a gold file or folder.
        pred: a prediction file or folder.
        langs: with folders, the languages to score; all gold languages when None.
        allow_missing: with folders, score the languages that have predictions and list the
            rest in `missing` instead of failing (callers that show the languages they score).
        role: what to call `pred` in errors (`--compare` for the second file of `score`).

    Raises:
        MushroomError: a path is missing, a file is paired with a folder, or (unless
            allowed) a language asked for has no file.
    """
    for name, path in (("GOLD", gold), (role, pred)):
        require_path(name, path)
    if gold.is_file() and pred.is_file():
        if langs:
            raise MushroomError(
                f"--langs {', '.join(langs)} picks files in folders; "
                f"GOLD and {role} are files (every line is scored)"
            )
        return Pairing([(lang_from_filename(gold) or "all", gold, pred)])
    if gold.is_dir() and pred.is_dir():
        golds, _ = files_by_lang(gold)
        if not golds:
            raise MushroomError(f"GOLD {gold}: no per-language files (such as mushroom.en-val.v2.jsonl)")
        tags = {split_tag(path) for path in golds.values()} - {None}
        tag = next(iter(tags)) if len(tags) == 1 else None
        preds, unnamed = files_by_lang(pred, tag)
        others = sorted({t for p in pred.glob("*.jsonl") if (t := split_tag(p)) not in (tag, None)})
        if tag is not None and not preds and others:
            # test files were paired with val gold: "none of its 154 ids is in the gold file"
            raise MushroomError(
                f"{role} {pred} holds {', '.join(others)} files and GOLD {gold} {tag} files: give the "
                f"prediction files of GOLD's split (mushroom.<lang>-{tag}...jsonl)"
            )
        wanted = sorted(golds) if langs is None else [x.lower() for x in langs]
        no_gold = [x for x in wanted if x not in golds]
        if no_gold:
            from mushroom.errors import did_you_mean

            raise MushroomError(
                f"--langs {', '.join(no_gold)}: no gold file in {gold}{did_you_mean(no_gold[0], golds)}; "
                f"it has {', '.join(sorted(golds))}"
            )
        if not preds:
            raise MushroomError(
                f"{role} {pred}: no per-language prediction files (named like mushroom.en-val.v2.jsonl)"
            )
        missing = [x for x in wanted if x not in preds]
        if missing and langs is not None:
            raise MushroomError(f"--langs {', '.join(missing)}: no prediction file in {pred}")
        if missing and not allow_missing:
            raise MushroomError(
                f"{pred}: no prediction file for {len(missing)} of {plural(len(wanted), 'language')} "
                f"({', '.join(missing)}); to score only some, name them: --langs "
                + ",".join(x for x in wanted if x in preds)
            )
        pairs = [(x, golds[x], preds[x]) for x in wanted if x in preds]
        if not pairs:
            raise MushroomError(f"no language has files in both {gold} and {pred}")
        extra = sorted(set(preds) - set(golds))
        left_out = sorted(x for x in preds if x in golds and x not in wanted)
        return Pairing(pairs, missing, extra, unnamed, left_out)
    for name, path in (("GOLD", gold), (role, pred)):
        if not (path.is_file() or path.is_dir()):  # /dev/null, a pipe: "GOLD is a file, PRED a file"
            raise MushroomError(f"{name} {path}: not a regular file or folder")
    if gold.is_file() and pred.is_dir():  # a folder with a file of GOLD's language was taken before
        raise MushroomError(
            f"{role} {pred} is a folder with no prediction file for GOLD {gold.name} "
            "(named like mushroom.en-val.v2.jsonl): give the prediction file itself, or GOLD's folder "
            f"{gold.parent} to score every language the two folders share"
        )
    if gold.is_dir() and zipfile.is_zipfile(pred):  # a submission as uploaded
        raise MushroomError(
            f"{role} {pred} is a zip archive: unzip it into a folder and score that folder against {gold}"
        )
    kinds = (
        f"GOLD is a {'folder' if gold.is_dir() else 'file'}, {role} a {'folder' if pred.is_dir() else 'file'}"
    )
    raise MushroomError(f"{kinds}: give two files, or two folders of per-language files")


def score_pairs(pairs: list[tuple[str, Path, Path]], partial: bool = False) -> ScoreResult:
    """Scores matched (lang, gold, prediction) files; items keep their language.

    `partial` scores only the predicted gold items (see `score_loaded`).
    """
    parts, problems, code = [], [], 1
    for lang, g, p in pairs:
        # every file's problems at once: a folder with two bad files was said one file a run
        try:
            parts.append(read_and_score(g, p, lang, partial))
        except DataError as exc:
            if len(pairs) == 1:
                raise
            problems += exc.problems
            code = max(code, exc.exit_code)
    if problems:
        raise DataError(problems, exit_code=code)
    return ScoreResult.concat(parts)


def score_paths(
    gold: str | Path,
    pred: str | Path,
    langs: list[str] | None = None,
    allow_missing: bool = False,
    partial: bool = False,
) -> ScoreResult:
    """Scores a file pair, or folders of per-language files (see `pair_paths`, `score_loaded`)."""
    return score_pairs(pair_paths(Path(gold), Path(pred), langs, allow_missing).pairs, partial)


def score_predictions(items: list, predictions: list, written: Path | None = None) -> ScoreResult:
    """Scores in-memory predictions against labelled items (for tuning loops).

    Files written by mushroom and scored with `score_files` give the official numbers; this
    skips the round trip through JSON, whose number parsing can change ties in the last bit.
    `written` is the file the predictions were read from, named in the warnings of either
    side (a warning of "<items>" named no file).
    """
    gold = ScoringFile(
        path=written or Path("<items>"),
        records={
            it.id: ScoringRecord(
                id=it.id,
                soft=[(s.start, s.end, s.prob) for s in (it.soft_labels or [])],
                hard=[tuple(h) for h in (it.hard_labels or [])],
                text_len=len(it.model_output_text),
                lang=it.lang,
            )
            for it in items
        },
    )
    pred = ScoringFile(
        path=written or Path("<predictions>"),
        records={
            p.id: ScoringRecord(
                id=p.id,
                soft=[(s.start, s.end, s.prob) for s in p.soft_labels],
                hard=[tuple(h) for h in p.hard_labels],
            )
            for p in predictions
        },
    )
    return score_loaded(gold, pred)
