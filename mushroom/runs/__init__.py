"""The run service and what it drives: run configs, the main job, the item ledger.

Layer 8: the only layer that orchestrates detectors, combination and scoring into run folders.
May import every layer below; only `mushroom.api` and `mushroom.cli.app.app` import it.
Runs draw nothing: they report through `runs.reporter.Reporter` (the CLI renders it with rich).
"""
