"""The official #1 per language (test split), parsed from data/mushroom/LEADERBOARD.md."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mushroom.data.splits import DEFAULT_DATA_DIR


@dataclass(frozen=True)
class LeaderboardEntry:
    """Best system by IoU on the test split of one language, and the mark-all baseline."""

    lang: str
    team: str
    iou: float
    cor: float
    mark_all_iou: float


_ROW = re.compile(r"^\|\s*([a-z]{2})\s*\|\s*(\S+)\s+([\d.]+)\s*/\s*([\d.]+)\s*\|[^|]*\|\s*([\d.]+)\s*\|\s*$")


def load_leaderboard(path: Path | None = None) -> dict[str, LeaderboardEntry]:
    """Language -> #1 by IoU; an absent file gives an empty table rather than an error."""
    path = path or DEFAULT_DATA_DIR / "LEADERBOARD.md"
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line.strip())
        if match:
            lang, team, iou, cor, mark_all = match.groups()
            out[lang] = LeaderboardEntry(lang, team, float(iou), float(cor), float(mark_all))
    return out
