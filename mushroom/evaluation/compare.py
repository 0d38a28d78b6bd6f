"""Comparing runs side by side: scores with intervals, paired tests, error-type counts, sweeps.

Everything is recomputed from the prediction files each run wrote, so any run can be
compared with any other without re-running a model, and the numbers match `mushroom score`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from mushroom.data.jsonl import load_records
from mushroom.data.predictions import (
    load_predictions,
    prediction_langs,
    prediction_vectors,
    submission_glob,
    submission_name,
)
from mushroom.data.records import ErrorType, Item
from mushroom.data.runfolder import RunScope, prediction_folder, run_scope
from mushroom.data.spans import hard_to_mask, soft_to_vector
from mushroom.data.splits import load_split, require_labelled, split_files
from mushroom.errors import DataError, MushroomError, Problem
from mushroom.evaluation.metrics import mask_iou, vector_cor
from mushroom.evaluation.score import ScoreResult, score_paths
from mushroom.evaluation.stats import bootstrap_ci, paired_test
from mushroom.util.words import no_prediction, plural


class ErrorTag(BaseModel):
    """One item's error type, from a small hand-written JSONL file (`{"id", "error_type"}`).

    Other keys are ignored, as in every data file mushroom reads (tags exported from an
    annotation tool carry the text, the annotator, ...); a misspelt `error_type` is still an
    error, since it is required.
    """

    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1)
    error_type: ErrorType
    note: str = ""


def load_tags(path: Path) -> dict[str, str]:
    """Item id -> error type; a bad line is reported with its file, line and field.

    An empty file is refused: it gave no table and no word, as if the tags had been read.
    """
    tags = {tag.id: tag.error_type for tag in load_records(path, ErrorTag)}
    if not tags:
        raise DataError(
            [Problem(str(path), None, None, 'no tag: give one JSON line per item, {"id", "error_type"}')]
        )
    return tags


@dataclass
class RunScores:
    """A run's per-item scores on a labelled split, and what part of the split it covered."""

    name: str
    path: Path
    result: ScoreResult
    scope: RunScope | None = None

    def coverage_note(self) -> str | None:
        """`RUN: scored 5 of 50 gold items: ...` when the run left gold items out, else None."""
        if self.scope is None or not self.result.unscored:
            return None
        return f"{self.name}: {self.scope.note(len(self.result.ids), self.result.n_gold)}"


def score_run(
    path: Path, split: str = "val", name: str | None = None, items: Path | None = None, partial: bool = False
) -> RunScores:
    """Scores a run folder's prediction files of a split (or of a labelled `items` file) against gold.

    Languages without a file are left out (the comparison keeps those every run has); a run
    made with `--limit` (its config.json says) is scored on the items it predicted, and so is
    every run with `partial` (a folder of an ensemble's files has no config to say it).
    """
    scope = run_scope(path)
    if partial and (scope is None or not scope.partial):
        scope = (
            replace(scope, predicted_only=True) if scope is not None else RunScope(path, predicted_only=True)
        )
    if items is not None:  # `detect --items` runs, against the file they were made on
        from mushroom.evaluation.runfiles import score_run_files

        # a run made with --limit is scored on its items, said by coverage_note
        found = score_run_files(
            items, path, None, note=lambda _: None, partial=scope is not None and scope.partial
        )
        return RunScores(name or path.name, path, found, scope)
    folder = prediction_folder(path, split)
    gold_dir = next(iter(split_files(split).values())).parent
    partial = scope is not None and scope.partial
    result = score_paths(gold_dir, folder, allow_missing=True, partial=partial)
    return RunScores(name or path.name, path, result, scope)


def common_items(runs: list[RunScores]) -> list[str]:
    """Cuts every run to the items all of them predicted when one was made with `--limit`.

    Paired tests need the same items: a limited run beside a full one was refused as "not the
    same items", though the docs promised it compared on the items it predicted. Returns the
    note that says so (nothing when no run is limited).
    """
    limited = [r for r in runs if r.scope is not None and r.scope.partial]
    shared = sorted(set.intersection(*(set(r.result.langs) for r in runs)))
    if not limited or not shared:  # no language in common: `comparison_rows` says so
        return []
    common = set.intersection(*(set(r.result.ids) for r in runs))
    if not common:
        raise MushroomError("the runs have no predicted item in common; compare runs made on the same items")
    most = max(len(r.result.of_langs(shared).ids) for r in runs)
    _keep_only(runs, common.__contains__)
    if len(common) == most:
        return []
    made = "; ".join(r.scope.made_with() for r in limited if r.scope is not None)
    return [f"compared on the {len(common)} items every run predicted, of {most}: {made}"]


def _keep_only(runs: list[RunScores], kept: Callable[[str], bool]) -> None:
    """Cuts each run's scores to the items `kept` takes; those cut are counted as unscored."""
    for run in runs:
        keep = [k for k, i in enumerate(run.result.ids) if kept(i)]
        unscored = run.result.unscored + len(run.result.ids) - len(keep)
        run.result = replace(run.result.subset(keep), warnings=run.result.warnings, unscored=unscored)


def failed_ids(run: Path, split: str) -> set[str] | None:
    """The items a run folder's files of a split hold empty because its run failed them.

    Read from the run's item ledger (or failures.jsonl), as `score` does for its note. None
    when no file of the split has either (bare prediction files): their failures, if any, are
    written as empty predictions that nothing tells from answers.
    """
    from mushroom.data.runfolder import FailureCheck

    failed: set[str] = set()
    recorded = False
    for path in sorted(prediction_folder(run, split).glob(submission_glob(split))):
        check = FailureCheck(path)
        recorded = recorded or check.has_record or check.skip
        try:
            found = check.check(load_predictions(path))
        except MushroomError:  # a file scoring reads as it is: said there, not here
            continue
        failed |= found.failed if found is not None else set()
    return failed if recorded else None


def without_failed(runs: list[RunScores], split: str) -> list[str]:
    """Leaves out of every run the items any run failed, as `mushroom run` compares its variants.

    A run made with `--allow-failures` writes a failed item empty: scored 0, it made one run
    look worse than another on items neither was asked to answer. Returns the notes: how many
    items were left out, and which runs keep no record of their failures (their empty
    predictions stay in, compared as answers).
    """
    found = {r.name: failed_ids(r.path, split) for r in runs}
    notes = [
        f"--answered: {name} keeps no record of failed items (no item ledger or failures.jsonl beside "
        "its files): its empty predictions are compared as answers"
        for name, ids in found.items()
        if ids is None
    ]
    failed = set().union(*(ids for ids in found.values() if ids))
    if not failed:
        return notes
    _keep_only(runs, lambda item_id: item_id not in failed)
    if not any(run.result.ids for run in runs):
        raise MushroomError("every item was failed by some run: nothing is left to compare")
    return [
        *notes,
        f"compared on the items every run answered: {plural(len(failed), 'item')} some run failed left out",
    ]


def left_out_languages(runs: list[RunScores]) -> list[str]:
    """One note per run with languages the comparison drops because another run lacks them.

    The overall row is the mean over the shared languages only: a run of 10 languages against
    one of 2 is compared on those 2, which a user should read before the numbers.
    """
    common = set.intersection(*(set(r.result.langs) for r in runs))
    notes = []
    for run in runs:
        extra = sorted(set(run.result.langs) - common)
        if extra:
            lacking = [r.name for r in runs if not set(extra) <= set(r.result.langs)]
            notes.append(
                f"{run.name}: {', '.join(extra)} left out, since {', '.join(lacking)} "
                f"{'lacks' if len(lacking) == 1 else 'lack'} them; compared on "
                f"{', '.join(sorted(common)) or 'nothing'}"
            )
    return notes


def comparison_rows(runs: list[RunScores], baseline: int = 0) -> list[dict]:
    """Per language and overall: each run's IoU/Cor with 95% CIs and the paired test vs the baseline.

    Overall is the mean over the languages every run covers (macro, as the leaderboard), and
    so are its interval and the paired test: the difference shown is of the two means shown.
    """
    base = runs[baseline]
    langs = sorted(set.intersection(*(set(r.result.langs) for r in runs)))
    if not langs:  # it wrote tables of n 0 and NaN, and exited 0
        have = "; ".join(f"{r.name}: {', '.join(sorted(set(r.result.langs))) or 'none'}" for r in runs)
        raise MushroomError(f"the runs share no language, so there is nothing to compare ({have})")
    rows = []
    base_per = base.result.by_lang()
    for run in runs:
        per = run.result.by_lang()
        for lang in [*langs, "all"]:
            groups = None
            if lang == "all":
                res, b = run.result.of_langs(langs), base.result.of_langs(langs)
                iou = float(np.mean([per[g].mean_iou for g in langs]))
                cor = float(np.mean([per[g].mean_cor for g in langs]))
                groups = np.array(res.langs)
            else:
                res, b = per[lang], base_per[lang]
                iou, cor = res.mean_iou, res.mean_cor
            ci = {"iou": bootstrap_ci(res.iou, groups=groups), "cor": bootstrap_ci(res.cor, groups=groups)}
            row = {
                "run": run.name,
                "lang": lang,
                "n": len(res.ids),
                "iou": iou,
                "iou_lo": ci["iou"][0],
                "iou_hi": ci["iou"][1],
                "cor": cor,
                "cor_lo": ci["cor"][0],
                "cor_hi": ci["cor"][1],
            }
            if run is not base:
                if res.ids != b.ids:
                    raise MushroomError(
                        f"runs {run.name} and {base.name} do not cover the same {lang} items; "
                        "compare runs of the same split and items"
                    )
                t_iou = paired_test(res.iou, b.iou, groups=groups)
                t_cor = paired_test(res.cor, b.cor, groups=groups)
                row.update(
                    d_iou=t_iou.mean_diff, p_iou=t_iou.p_value, d_cor=t_cor.mean_diff, p_cor=t_cor.p_value
                )
            rows.append(row)
    return rows


def tag_rows(runs: list[RunScores], tags: dict[str, str]) -> list[dict]:
    """Per error type: how many tagged items the runs scored, and each run's mean IoU/Cor on them.

    A tag for an item the runs did not score (another language, a --limit run, a typo) is
    left out of the count; `unscored_tags` names those for a warning.
    """
    scored = set(runs[0].result.ids) if runs else set()
    rows = []
    for error_type in sorted(set(tags.values())):
        ids = {i for i, t in tags.items() if t == error_type and i in scored}
        if not ids:
            continue
        row: dict = {"error_type": error_type, "items": len(ids)}
        for run in runs:
            mask = np.array([i in ids for i in run.result.ids])
            row[f"{run.name} IoU"] = float(run.result.iou[mask].mean()) if mask.any() else float("nan")
            row[f"{run.name} Cor"] = float(run.result.cor[mask].mean()) if mask.any() else float("nan")
        rows.append(row)
    return rows


def unscored_tags(tags: dict[str, str], ids: list[str]) -> list[str]:
    """Tagged ids that are not among `ids` (the items scored, or shown on a page)."""
    known = set(ids)
    return [i for i in tags if i not in known]


COLUMNS = [
    "run",
    "lang",
    "n",
    "iou",
    "iou_lo",
    "iou_hi",
    "cor",
    "cor_lo",
    "cor_hi",
    "d_iou",
    "p_iou",
    "d_cor",
    "p_cor",
]


def rows_csv(rows: list[dict], columns: list[str] | None = None) -> str:
    """CSV text of rows (missing cells empty, floats with 4 decimals)."""
    columns = columns or list(rows[0])
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_fmt(row.get(c)) for c in columns])
    return buf.getvalue()


def rows_markdown(rows: list[dict], columns: list[str] | None = None) -> str:
    """A Markdown table of rows."""
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(map(_cell, columns)) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(_fmt(row.get(c))) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """A Markdown table cell: a `|` or a line break in a run's name split its row."""
    return " ".join(text.split("\n")).replace("|", "\\|")


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


# ---- threshold sweep -------------------------------------------------------------------

THRESHOLDS = [round(t, 2) for t in np.arange(0.05, 1.0, 0.05)]


@dataclass
class SweepScope:
    """The items a sweep covers, and what the user should be told about how they were chosen."""

    data: dict[str, list[Item]]
    notes: list[str]


def sweep_scope(runs: list[Path], split: str = "val", langs: list[str] | None = None) -> SweepScope:
    """The runs' languages (unless `langs` are given) and, for runs made with --limit, their items.

    Without `langs`, the languages every run has a file for are swept, and the others
    named: a run made with `--lang en`, or a folder of loose files, has no file for the
    other languages. A run made with `--limit 5` has no prediction for the other items; its
    config.json says so. Runs without a config (plain folders of files) cover every item of
    their languages, so a missing one stays an error.
    """
    scopes = [s for s in (run_scope(r) for r in runs) if s is not None]
    notes = []
    if langs is None:
        # the languages every run has a file for (a run made with --lang has only those)
        found = [set(prediction_langs(prediction_folder(r, split), split)) for r in runs]
        langs = sorted(set.intersection(*found)) if found else []
        limited = [s.made_with() for s in scopes if s.langs]
        if not langs:
            raise MushroomError(
                f"the runs share no language with {split} prediction files: "
                + "; ".join(f"{r}: {', '.join(sorted(f)) or 'none'}" for r, f in zip(runs, found))
                + ("; " + "; ".join(limited) if limited else "")
                + "; give --lang"
            )
        left = sorted(set.union(*found) - set(langs))
        if left or limited:
            why = [f"not every run has {', '.join(left)}"] if left else []
            notes.append(f"sweeping {', '.join(langs)}: " + "; ".join(why + limited))
    data = load_split(split, langs)
    for run in runs:  # a language asked for with --lang that a run lacks
        folder = prediction_folder(run, split)
        lacking = [lang for lang in data if not (folder / submission_name(lang, split)).is_file()]
        if lacking:
            scope = run_scope(run)
            made = f" ({scope.made_with()})" if scope is not None and scope.langs else ""
            has = ", ".join(prediction_langs(folder, split)) or "none"
            raise MushroomError(
                f"{run} has no {split} predictions for {', '.join(lacking)}{made}; it has: {has}"
            )
    partial = [s for s in scopes if s.partial]
    if partial:
        total = sum(len(items) for items in data.values())
        for lang, items in data.items():
            for run in runs:
                predicted = load_predictions(prediction_folder(run, split) / submission_name(lang, split))
                items = [it for it in items if it.id in predicted]
            data[lang] = items
        data = {lang: items for lang, items in data.items() if items}
        if not data:
            raise MushroomError(
                "the runs have no predicted item in common; sweep runs made on the same items"
            )
        notes.append(partial[0].note(sum(len(items) for items in data.values()), total, "swept"))
    return SweepScope(data, notes)


def sweep(
    runs: list[Path],
    split: str = "val",
    thresholds: list[float] | None = None,
    langs: list[str] | None = None,
    data: dict[str, list[Item]] | None = None,
) -> list[dict]:
    """IoU and Cor against the threshold for a run, or for the vote of several runs.

    With one run the threshold applies to its soft probabilities; with several, to the
    mean of their soft probabilities. Hard labels are the characters above the threshold;
    Cor is computed with probabilities below the threshold set to 0 (the `floor` a stack
    uses), which is why it moves too. Macro means over languages.
    """
    thresholds = thresholds or THRESHOLDS
    data = data if data is not None else load_split(split, langs)
    require_labelled(data, split, "a threshold sweep")
    iou = {t: [] for t in thresholds}
    cor = {t: [] for t in thresholds}
    for lang, items in data.items():
        lengths = {item.id: len(item.model_output_text) for item in items}
        files = [prediction_folder(r, split) / submission_name(lang, split) for r in runs]
        # a run's other items are left out (a full run swept with one made with --limit)
        preds = [load_predictions(f, lengths, other_ids=True) for f in files]
        for file, pred in zip(files, preds):
            missing = [item.id for item in items if item.id not in pred]
            if missing:
                # an invalid input file: exit 1 in the checker's form, as compare and score say it
                raise DataError.single(file, None, "id", no_prediction(missing, total=len(items)))
        lang_iou = {t: [] for t in thresholds}
        lang_cor = {t: [] for t in thresholds}
        for item in items:
            n = len(item.model_output_text)
            soft = np.mean([prediction_vectors(p[item.id], n)[0] for p in preds], axis=0)
            soft = np.round(soft, 6)
            gold_mask = hard_to_mask(item.hard_labels or [], n)
            gold_soft = soft_to_vector(item.soft_labels or [], n)
            for t in thresholds:
                lang_iou[t].append(mask_iou(gold_mask, soft > t))
                lang_cor[t].append(vector_cor(gold_soft, np.where(soft > t, soft, 0.0)))
        for t in thresholds:
            iou[t].append(np.mean(lang_iou[t]))
            cor[t].append(np.mean(lang_cor[t]))
    return [
        {"threshold": t, "iou": float(np.mean(iou[t])), "cor": float(np.mean(cor[t]))} for t in thresholds
    ]


def sweep_svg(rows: list[dict], title: str = "threshold sweep") -> str:
    """A small self-contained SVG line plot of IoU and Cor against the threshold."""
    w, h, pad, left = 560, 300, 40, 64  # `left`: room for the y axis's numbers and its title
    xs = [r["threshold"] for r in rows]
    x_lo, x_hi = min(xs), max(xs)

    def px(x: float) -> float:
        return left + (x - x_lo) / max(x_hi - x_lo, 1e-9) * (w - left - pad)

    def py(y: float) -> float:
        return h - pad - y * (h - 2 * pad)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
        f'<text x="{w / 2}" y="16" text-anchor="middle" font-size="13">{_escape(title)}</text>',
        f'<line x1="{left}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
        f'<line x1="{left}" y1="{pad}" x2="{left}" y2="{h - pad}" stroke="black"/>',
        # what the axes are, and each best point's value: a reader saw two dots and two words
        f'<text x="{(left + w - pad) / 2}" y="{h - 6}" text-anchor="middle">hard-label threshold</text>',
        f'<text x="14" y="{h / 2}" text-anchor="middle" transform="rotate(-90 14 {h / 2})">'
        "mean over languages</text>",
    ]
    for y in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<text x="{left - 6}" y="{py(y) + 4}" text-anchor="end">{y:.2f}</text>')
        parts.append(f'<line x1="{left}" y1="{py(y)}" x2="{w - pad}" y2="{py(y)}" stroke="#eee"/>')
    for x in xs[:: max(1, len(xs) // 6)]:
        parts.append(f'<text x="{px(x)}" y="{h - pad + 14}" text-anchor="middle">{x:.2f}</text>')
    for k, (key, name, colour) in enumerate((("iou", "IoU", "#1f77b4"), ("cor", "Cor", "#d62728"))):
        points = " ".join(f"{px(r['threshold']):.1f},{py(r[key]):.1f}" for r in rows)
        parts.append(
            f'<polyline class="{key}" fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>'
        )
        best = max(rows, key=lambda r: r[key])
        bx, by = px(best["threshold"]), py(best[key])
        parts.append(f'<circle cx="{bx:.1f}" cy="{by:.1f}" r="4" fill="{colour}"/>')
        side = "start" if bx < w / 3 else "end" if bx > 2 * w / 3 else "middle"  # kept on the plot
        parts.append(
            f'<text x="{bx:.1f}" y="{by - 8:.1f}" text-anchor="{side}" fill="{colour}">'
            f"best {best[key]:.3f} at {best['threshold']:.2f}</text>"
        )
        lx = w - pad - 110 + 60 * k  # the legend: a line sample and the metric's name
        parts.append(
            f'<line x1="{lx}" y1="{pad - 12}" x2="{lx + 18}" y2="{pad - 12}" stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{lx + 22}" y="{pad - 8}" fill="{colour}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def ascii_sweep(rows: list[dict], width: int = 40) -> str:
    """The sweep as text bars, for the terminal."""
    lines = []
    for r in rows:
        bar = "#" * int(round(r["iou"] * width))
        lines.append(f"{r['threshold']:.2f} IoU {r['iou']:.4f} Cor {r['cor']:.4f} |{bar}")
    return "\n".join(lines)
