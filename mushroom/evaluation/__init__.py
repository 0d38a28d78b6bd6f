"""Scoring as the official scorer does it, with CIs; checked submission files; compare and report.

Layer 6: may import data, detectors and backends (for raw records); never the combine or run
layers, so the scorer can be used by every stage above it.
"""
