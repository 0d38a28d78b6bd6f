"""`stack`: a learned per-character combination of detector runs, fitted on labelled data.

The package is split by job: `members` (where member runs are and loading their files),
`features` (per-character features), `model` (the logistic fit and the saved model),
`decoding` (word hard labels, cut-offs, hard-label source), `folds` (the one fold
assignment used by the CV and every nested choice), `fit` (fit and apply) and
`fingerprint` (whether a saved fit is still current, so a caller can skip refitting).
"""

from mushroom.combine.stack.decoding import best_hard_sources, nested_hard_sources, word_hard_mask
from mushroom.combine.stack.fingerprint import stack_fingerprint
from mushroom.combine.stack.fit import (
    StackConfig,
    StackFit,
    apply_stack,
    cross_validate,
    fit_stack,
    stack_behind,
)
from mushroom.combine.stack.members import Member, parse_members
from mushroom.combine.stack.model import StackModel, fit_logistic

__all__ = [
    "Member",
    "StackConfig",
    "StackFit",
    "StackModel",
    "apply_stack",
    "best_hard_sources",
    "cross_validate",
    "fit_logistic",
    "fit_stack",
    "nested_hard_sources",
    "parse_members",
    "stack_behind",
    "stack_fingerprint",
    "word_hard_mask",
]
