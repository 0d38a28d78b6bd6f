"""How much the answering model's own token logits say about the gold labels, per val language.

Usage: python benchmarks/logit_correlation.py [--langs en,fr]
For each val item whose gold soft labels and logit feature both vary, the Spearman
correlation between the gold per-character probability and `logit_negz` (minus the logit's
z-score within the answer, `mushroom.text.logits`), averaged per language: the figures the
module's docstring quotes.
"""

import argparse

import numpy as np
from _args import val_langs
from scipy.stats import spearmanr

from mushroom.data.spans import soft_to_vector
from mushroom.data.splits import load_split
from mushroom.text.logits import logit_columns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--langs", type=val_langs, default=None, help="val languages, e.g. en,fr (default: all)"
    )
    args = parser.parse_args()
    for lang, items in load_split("val", args.langs).items():
        cors = []
        for it in items:
            gold = soft_to_vector(it.soft_labels or [], len(it.model_output_text))
            negz = logit_columns(it.model_output_text, it.model_output_tokens, it.model_output_logits)[:, 0]
            if gold.std() > 0 and negz.std() > 0:
                cors.append(spearmanr(gold, negz).statistic)
        print(f"{lang}: {np.mean(cors):+.3f} mean Spearman over {len(cors)} items")


if __name__ == "__main__":
    main()
