"""Cross-validated val scores of the calibrated lexical detector, and the table it ships.

Usage:
  python benchmarks/lexical_calibration.py            # 5-fold CV by item, threshold sweep
  python benchmarks/lexical_calibration.py --write    # also refit on all val and save the
                                                      # table to mushroom/resources/

Items are split into folds within each language; the table is fitted on the other folds
of every language and applied to the held-out items, so no item is scored by a table that
saw its own labels. The uncalibrated detector (raw shares) is printed for comparison.
"""

import argparse

import numpy as np
from _args import at_least_two, number_list

from mushroom.data.contexts import load_contexts
from mushroom.data.predictions import mark_all, prediction_from_vectors
from mushroom.data.splits import load_split
from mushroom.detectors.lexical import LexicalDetector, LexicalOptions, fit_calibration
from mushroom.detectors.lexical_calibration import DEFAULT_CALIBRATION, save_calibration
from mushroom.evaluation.score import score_predictions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=at_least_two, default=5)
    parser.add_argument("--smoothing", type=float, default=20.0)
    parser.add_argument("--thresholds", type=number_list, default="0.2,0.25,0.3,0.35,0.4,0.45,0.5")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    thresholds = args.thresholds
    data = {lang: (items, load_contexts("val", lang).by_id) for lang, items in load_split("val").items()}
    base_opts = LexicalOptions(calibration=None, channels=False)  # only probabilities are read
    vectors: dict[str, dict[str, np.ndarray]] = {lang: {} for lang in data}
    for fold in range(args.folds):
        train = {
            lang: ([it for k, it in enumerate(items) if k % args.folds != fold], ctx)
            for lang, (items, ctx) in data.items()
        }
        table = fit_calibration(train, base_opts, smoothing=args.smoothing)
        det = LexicalDetector(base_opts)
        det.calibration = table
        for lang, (items, ctx) in data.items():
            for k, item in enumerate(items):
                if k % args.folds == fold:
                    vectors[lang][item.id] = det.item_vector(item, ctx.get(item.id, []))
    raw = LexicalDetector(LexicalOptions(calibration=None, channels=False))
    print(f"{'':5s}" + "".join(f"  t={t:<5}IoU/Cor " for t in thresholds) + "   raw IoU/Cor   mark-all")
    means = np.zeros((len(thresholds), 2))
    raw_means = np.zeros(2)
    for lang, (items, ctx) in data.items():
        cells = []
        for i, t in enumerate(thresholds):
            preds = [
                prediction_from_vectors(it.id, vectors[lang][it.id], vectors[lang][it.id] > t) for it in items
            ]
            res = score_predictions(items, preds)
            means[i] += (res.mean_iou, res.mean_cor)
            cells.append(f"  {res.mean_iou:.3f}/{res.mean_cor:.3f}  ")
        res_raw = score_predictions(items, raw.detect(items, ctx))
        raw_means += (res_raw.mean_iou, res_raw.mean_cor)
        base = score_predictions(items, mark_all(items)).mean_iou
        print(
            f"{lang:5s}" + "".join(cells) + f"   {res_raw.mean_iou:.3f}/{res_raw.mean_cor:.3f}   {base:.3f}"
        )
    means /= len(data)
    raw_means /= len(data)
    print(
        f"{'mean':5s}"
        + "".join(f"  {a:.3f}/{b:.3f}  " for a, b in means)
        + f"   {raw_means[0]:.3f}/{raw_means[1]:.3f}"
    )
    best = int(np.argmax(means[:, 0]))
    print(
        f"best CV threshold by mean IoU: {thresholds[best]} (IoU {means[best, 0]:.4f}, Cor {means[best, 1]:.4f})"
    )
    if args.write:
        table = fit_calibration(
            data, base_opts, smoothing=args.smoothing, fitted_on="Mu-SHROOM val v2, 10 languages"
        )
        save_calibration(table, DEFAULT_CALIBRATION)
        print(f"wrote {DEFAULT_CALIBRATION}")


if __name__ == "__main__":
    main()
