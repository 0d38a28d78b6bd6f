"""Plain helpers every layer may use: counted nouns, name suggestions, option parsing, interrupts.

Layer 0, with `mushroom.errors`: imports nothing else of mushroom, so any module can use it.
"""
