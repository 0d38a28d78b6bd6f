"""Calibration of the lexical detector: token bucket -> expected annotator share.

Whether an unsupported word is a hallucination depends a lot on what kind of word it is
and on the language's annotation habits: on English val an unsupported number is marked by
annotators ~80% of the time, an unsupported lowercase word ~25%, while in French the latter
is ~65%. The table stores, per language and pooled over languages, the sum of the gold soft
probability over tokens of each bucket and their count; a language's estimate is shrunk
towards the pooled one (languages without val data, such as ca/cs/eu/fa, use the pool).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from mushroom.errors import MushroomError

RESOURCE_DIR = Path(__file__).resolve().parent.parent / "resources"
DEFAULT_CALIBRATION = RESOURCE_DIR / "lexical_calibration.json"


class Calibration(BaseModel):
    """Bucket statistics; `prob` turns them into a probability."""

    stats: dict[str, dict[str, tuple[float, int]]] = Field(
        default_factory=dict, description="lang -> bucket -> (sum of gold probability, tokens)"
    )
    smoothing: float = Field(20.0, ge=0.0, description="pseudo-count of the pooled estimate")
    fitted_on: str = ""

    def pooled(self, bucket: str) -> float | None:
        total, count = 0.0, 0
        for table in self.stats.values():
            if bucket in table:
                total += table[bucket][0]
                count += table[bucket][1]
        return total / count if count else None

    def prob(self, lang: str, bucket: str) -> float:
        """Expected share of annotators marking a token of this bucket in this language."""
        prior = self.pooled(bucket)
        if prior is None:
            return 0.0
        if lang in self.stats and bucket in self.stats[lang]:
            total, count = self.stats[lang][bucket]
            return (total + self.smoothing * prior) / (count + self.smoothing)
        return prior


def load_calibration(name: str) -> Calibration:
    """'default' loads the table shipped with mushroom; anything else is a JSON path."""
    path = DEFAULT_CALIBRATION if name == "default" else Path(name)
    if not path.is_file():
        from mushroom.data.jsonl import refuse_irregular

        refuse_irregular(path)
        raise MushroomError(f"lexical calibration file not found: {path}")
    try:
        return Calibration.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise MushroomError(f"{path}: not a lexical calibration table ({exc})") from exc


def save_calibration(calibration: Calibration, path: Path) -> None:
    """Writes a table as sorted, diff-friendly JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(calibration.model_dump(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
