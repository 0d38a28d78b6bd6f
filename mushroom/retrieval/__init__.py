"""Background contexts made by an open LLM, and their grading (LLM or embedding).

Layer 5: may import data, models, backends and detectors (for prompts); never evaluation, runs or cli.
"""
