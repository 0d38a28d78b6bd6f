"""Language-aware text tools shared by the detectors and the stack: tokens, stopwords, negation.

Layer 1: pure functions over strings; imports nothing of mushroom above `mushroom.util`.
"""
