"""The run service and what it drives: run configs, the main job, the item ledger.

Layer 8: the only layer that orchestrates detectors, combination and scoring into run folders.
May import every layer below; only `mushroom.api` and `mushroom.cli.app.app` import it.
Runs draw nothing: they report through `runs.reporter.Reporter` (the CLI renders it with rich).
"""

# Items a run reads, runs and records at a time: memory holds one chunk's items, contexts and
# evidence, whatever the corpus's size. A language of the shared task's splits (at most a few
# hundred items) is one chunk, so its detector calls are what they were before chunking. Here,
# in a module that imports nothing, so `mushroom.api` takes the same size without the service.
CHUNK_ITEMS = 1000
