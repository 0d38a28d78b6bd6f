"""Scoring prediction files against gold files: per item, per language, overall."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mushroom.data import lang_from_filename
from mushroom.errors import DataError, MushroomError, Problem
from mushroom.scoring.files import ScoringFile, ScoringRecord, match_ids, read_scoring_file
from mushroom.scoring.metrics import OfficialScorerCrash, item_cor, item_iou
from mushroom.scoring.stats import bootstrap_ci


@dataclass
class ScoreResult:
    """Per-item scores in the official order (gold ids sorted), and what was noticed."""

    ids: list[str]
    langs: list[str]
    iou: np.ndarray
    cor: np.ndarray
    warnings: list[str] = field(default_factory=list)

    @property
    def mean_iou(self) -> float:
        return float(self.iou.mean()) if self.iou.size else float("nan")

    @property
    def mean_cor(self) -> float:
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
        groups: dict[str, list[int]] = {}
        for i, lang in enumerate(self.langs):
            groups.setdefault(lang, []).append(i)
        return {lang: self.subset(idx) for lang, idx in sorted(groups.items())}

    def ci(self, seed: int = 0) -> dict[str, tuple[float, float]]:
        return {"iou": bootstrap_ci(self.iou, seed=seed), "cor": bootstrap_ci(self.cor, seed=seed)}

    def to_dict(self, with_items: bool = False) -> dict:
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


def score_loaded(gold: ScoringFile, pred: ScoringFile, lang: str | None = None) -> ScoreResult:
    """Scores two loaded files item by item."""
    ids = match_ids(gold, pred)
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
            problems.append(Problem(str(pred.path), None, f"id={rid}", str(exc)))
    if problems:
        raise DataError(problems)
    file_lang = lang or lang_from_filename(gold.path) or "all"
    langs = [gold.records[r].lang or file_lang for r in ids]
    return ScoreResult(ids, langs, ious, cors, warnings=gold.warnings + pred.warnings)


def score_files(gold_path: str | Path, pred_path: str | Path) -> ScoreResult:
    """Scores one prediction file against one gold file, exactly as the official scorer."""
    gold = read_scoring_file(gold_path, is_gold=True)
    pred = read_scoring_file(pred_path, is_gold=False)
    return score_loaded(gold, pred)


def _files_by_lang(folder: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(folder.glob("*.jsonl")):
        lang = lang_from_filename(path)
        if lang:
            found[lang] = path
    return found


def pair_paths(gold: Path, pred: Path) -> list[tuple[str, Path, Path]]:
    """(lang, gold file, prediction file) for a file pair or two folders matched by language."""
    if gold.is_file() and pred.is_file():
        return [(lang_from_filename(gold) or "all", gold, pred)]
    if gold.is_dir() and pred.is_dir():
        golds, preds = _files_by_lang(gold), _files_by_lang(pred)
        common = sorted(set(golds) & set(preds))
        if not common:
            raise MushroomError(f"no language has files in both {gold} and {pred}")
        return [(lang, golds[lang], preds[lang]) for lang in common]
    raise MushroomError("GOLD and PRED must both be files or both be folders")


def score_paths(gold: str | Path, pred: str | Path) -> ScoreResult:
    """Scores a file pair, or folders of per-language files; items keep their language."""
    parts = []
    for lang, g, p in pair_paths(Path(gold), Path(pred)):
        result = score_loaded(read_scoring_file(g, True), read_scoring_file(p, False), lang)
        parts.append(result)
    return ScoreResult(
        ids=[i for r in parts for i in r.ids],
        langs=[lang for r in parts for lang in r.langs],
        iou=np.concatenate([r.iou for r in parts]),
        cor=np.concatenate([r.cor for r in parts]),
        warnings=[w for r in parts for w in r.warnings],
    )


def score_predictions(items: list, predictions: list) -> ScoreResult:
    """Scores in-memory predictions against labelled items (for tuning loops).

    Files written by mushroom and scored with `score_files` give the official numbers; this
    skips the round trip through JSON, whose number parsing can change ties in the last bit.
    """
    gold = ScoringFile(
        path=Path("<items>"),
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
        path=Path("<predictions>"),
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
