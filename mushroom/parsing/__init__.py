"""Turning whatever a model wrote into valid character spans (the repair parser)."""
