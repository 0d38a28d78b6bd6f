"""The official scoring procedure re-enacted step by step, for parity tests.

Written from the official scorer's behaviour (not copied): pandas.read_json(lines=True)
for both files, labels derived per file, records sorted by id, then per-character loops
and scipy.stats.spearmanr. Only the tests use it; it needs pandas.
"""

import numpy as np
import pandas as pd
from scipy.stats import spearmanr


def _hard_from_soft(soft):
    hard, prev_end = [], -1
    for span in sorted(soft, key=lambda s: (s["start"], s["end"])):
        if span["prob"] > 0.5:
            if span["start"] == prev_end:
                hard[-1][1] = span["end"]
            else:
                hard.append([span["start"], span["end"]])
            prev_end = span["end"]
    return hard


def _records(path, is_ref):
    df = pd.read_json(path, lines=True)
    if not is_ref:
        if "hard_labels" not in df.columns:
            df["hard_labels"] = df.soft_labels.apply(_hard_from_soft)
        elif "soft_labels" not in df.columns:
            df["soft_labels"] = df.hard_labels.apply(
                lambda h: [{"start": s, "end": e, "prob": 1.0} for s, e in h]
            )
    cols = ["id", "soft_labels", "hard_labels"]
    if is_ref:
        df["text_len"] = df.model_output_text.apply(len)
        cols.append("text_len")
    return df[cols].sort_values("id").to_dict(orient="records")


def _iou(ref, pred):
    r = {i for s in ref["hard_labels"] for i in range(*s)}
    p = {i for s in pred["hard_labels"] for i in range(*s)}
    if not r and not p:
        return 1.0
    return len(r & p) / len(r | p)


def _cor(ref, pred):
    rv = [0.0] * ref["text_len"]
    pv = [0.0] * ref["text_len"]
    for s in ref["soft_labels"]:
        for i in range(s["start"], s["end"]):
            rv[i] = s["prob"]
    for s in pred["soft_labels"]:
        for i in range(s["start"], s["end"]):
            pv[i] = s["prob"]
    nr, npred = len({round(x, 8) for x in rv}), len({round(x, 8) for x in pv})
    if nr == 1 or npred == 1:
        return float(nr == npred)
    return spearmanr(rv, pv).correlation


def official_scores(ref_path, pred_path):
    refs, preds = _records(ref_path, True), _records(pred_path, False)
    assert len(refs) == len(preds)
    # as the official scorer does: a file of other ids (another language's) stops it
    assert all(r["id"] == p["id"] for r, p in zip(refs, preds)), "the files' ids differ"
    ious = np.array([_iou(r, p) for r, p in zip(refs, preds)])
    cors = np.array([_cor(r, p) for r, p in zip(refs, preds)])
    return ious.mean(), cors.mean()
