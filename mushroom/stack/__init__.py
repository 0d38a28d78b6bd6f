"""`stack`: a learned per-character combination of detector runs, fitted on labelled data.

The package is split by job: `members` (where member runs are and loading their files),
`features` (per-character features), `model` (the logistic fit and the saved model),
`decoding` (word hard labels, cut-offs, hard-label source), `folds` (the one fold
assignment used by the CV and every nested choice) and `fit` (fit and apply).
"""

from mushroom.stack.decoding import best_hard_sources, nested_hard_sources, word_hard_mask
from mushroom.stack.fit import StackFit, apply_stack, cross_validate, fit_stack
from mushroom.stack.members import Member, parse_members
from mushroom.stack.model import StackModel, fit_logistic

__all__ = [
    "Member",
    "StackFit",
    "StackModel",
    "apply_stack",
    "best_hard_sources",
    "cross_validate",
    "fit_logistic",
    "fit_stack",
    "nested_hard_sources",
    "parse_members",
    "word_hard_mask",
]
