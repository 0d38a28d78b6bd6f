"""Score tables as values (rows) and as Markdown; the terminal's rendering is the CLI's (cli/tables.py)."""

from __future__ import annotations

from mushroom.evaluation.leaderboard import LeaderboardEntry
from mushroom.evaluation.score import ScoreResult


def _ci(low: float, high: float) -> str:
    return f"[{low:.3f}, {high:.3f}]"


def score_rows(
    results: dict[str, ScoreResult],
    baselines: dict[str, ScoreResult] | None = None,
    leaderboard: dict[str, LeaderboardEntry] | None = None,
) -> list[dict]:
    """One row per language plus a macro-average row, as plain values."""
    rows = []
    for lang, res in results.items():
        ci = res.ci()
        row = {
            "lang": lang,
            "n": len(res.ids),
            "iou": res.mean_iou,
            "iou_ci": ci["iou"],
            "cor": res.mean_cor,
            "cor_ci": ci["cor"],
        }
        if baselines and lang in baselines:
            row["mark_all_iou"] = baselines[lang].mean_iou
        if leaderboard and lang in leaderboard:
            row["lb1"] = leaderboard[lang]
        rows.append(row)
    return rows


def mean_row(rows: list[dict]) -> dict:
    """The macro-average of `score_rows` rows, one for both tables.

    `mark_all_iou` is None unless every language has the baseline; `lb1` is the mean
    (IoU, Cor) of the languages with a leaderboard entry (None without any).
    """
    n = len(rows)
    lbs = [r["lb1"] for r in rows if "lb1" in r]
    return {
        "n": sum(r["n"] for r in rows),
        "iou": sum(r["iou"] for r in rows) / n,
        "cor": sum(r["cor"] for r in rows) / n,
        "mark_all_iou": (
            sum(r["mark_all_iou"] for r in rows) / n if all("mark_all_iou" in r for r in rows) else None
        ),
        "lb1": (sum(x.iou for x in lbs) / len(lbs), sum(x.cor for x in lbs) / len(lbs)) if lbs else None,
    }


def markdown_table(rows: list[dict]) -> str:
    """The scores table as Markdown, written next to the scores, with the same rows and mean row.

    Its CIs are columns of their own, to 3 decimals (the terminal writes them in the cell).

    A column with nothing in it (no mark-all baseline outside the main job, no leaderboard
    entry for a language) is left out, as in the terminal.
    """
    has_base = any("mark_all_iou" in r for r in rows)
    has_lb = any("lb1" in r for r in rows)
    head = ["lang", "n", "IoU", "IoU 95% CI", "Cor", "Cor 95% CI"]
    head += ["mark-all IoU"] * has_base + ["LB #1 (test) IoU / Cor"] * has_lb
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r["lang"],
            str(r["n"]),
            f"{r['iou']:.4f}",
            _ci(*r["iou_ci"]),
            f"{r['cor']:.4f}",
            _ci(*r["cor_ci"]),
        ]
        if has_base:
            base = r.get("mark_all_iou")
            cells.append("" if base is None else f"{base:.4f}")
        if has_lb:
            lb = r.get("lb1")
            cells.append("" if lb is None else f"{lb.iou:.4f} / {lb.cor:.4f} ({lb.team})")
        lines.append("| " + " | ".join(cells) + " |")
    if len(rows) > 1:
        m = mean_row(rows)
        cells = ["**mean**", str(m["n"]), f"{m['iou']:.4f}", "", f"{m['cor']:.4f}", ""]
        if has_base:
            cells.append("" if m["mark_all_iou"] is None else f"{m['mark_all_iou']:.4f}")
        if has_lb:
            cells.append(f"{m['lb1'][0]:.4f} / {m['lb1'][1]:.4f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
