"""Combining runs: the per-character vote ensemble and the learned stack.

Layer 7: may import data, text and evaluation (the stack scores its own folds); never runs or cli.
"""
