"""What mushroom reads and writes: items, predictions, contexts, JSONL, run folders on disk.

Layer 1: pydantic records and file readers. May import `mushroom.util`, `mushroom.errors`,
`mushroom.text` and `mushroom.parsing`; never a model, a backend or the command line.
"""
