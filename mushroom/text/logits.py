"""The answering model's confidence per character, from the token logits the official files carry.

Val and test items come with the answering model's tokens and the logit of each token it
produced. A low logit (relative to the rest of the same answer) marks a token the model was
unsure of, which is weak evidence of a made-up detail: per item, its Spearman correlation
with the gold soft labels averages -0.04 to +0.09 for ar, de, en, fr and sv but 0.12-0.21
for es, fi, hi, it and zh on val (`benchmarks/logit_correlation.py`). The models, and so
the logit scales, differ between languages and between val and test, so only
within-answer ranks and z-scores are used.

Tokens are written in the tokenizer's own alphabet: byte-level BPE (GPT-2 style, "Ġ" for a
space), SentencePiece ("▁" for a space, "<0x0A>" for a byte) or plain text, sometimes with
special tokens ("<bos>") or a prompt echo. They are decoded best effort and laid on the
answer in order (see `token_of_chars`); characters no token covers take the previous
token's value.
"""

from __future__ import annotations

import difflib
from functools import lru_cache

import numpy as np

LOGIT_FEATURES = ("logit_negz", "logit_low_rank", "logit_present")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet: printable stand-in character -> byte."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def decode_tokens(tokens: list[str]) -> list[str]:
    """Each token as the text it stands for (special tokens as empty strings)."""
    decoder = _byte_decoder()
    byte_level = any("Ġ" in t or "Ċ" in t for t in tokens)
    out = []
    for tok in tokens:
        if len(tok) > 2 and tok.startswith("<") and tok.endswith(">"):
            out.append("\n" if tok == "<0x0A>" else " " if tok.startswith("<0x") else "")
        elif byte_level and all(ch in decoder for ch in tok):
            out.append(bytes(decoder[ch] for ch in tok).decode("utf-8", errors="replace"))
        else:
            out.append(tok.replace("▁", " "))
    return out


def token_of_chars(text: str, tokens: list[str]) -> np.ndarray:
    """The index of the token each character of `text` came from (-1 before the first match).

    Most answers are their tokens' text exactly, so tokens are first laid on the text one
    after the other (a token found a few characters further on is placed there; one not
    found is skipped), which takes linear time. Only when that covers less than 95% of the
    text do the longest matching blocks decide (difflib: quadratic on long answers).
    """
    pieces = decode_tokens(tokens)
    of = _lay_tokens(text, pieces)
    if len(text) and (of >= 0).mean() < 0.95:
        of = _match_blocks(text, pieces)
    # Characters no token covers take the previous character's token.
    idx = np.where(of >= 0, np.arange(len(text)), -1)
    filled = np.maximum.accumulate(idx) if len(idx) else idx
    return np.where(filled >= 0, of[np.clip(filled, 0, None)], -1)


def _lay_tokens(text: str, pieces: list[str], slack: int = 8) -> np.ndarray:
    of = np.full(len(text), -1)
    pos = 0
    for k, piece in enumerate(pieces):
        if not piece:
            continue
        if text.startswith(piece, pos):
            start = pos
        else:
            core = piece.strip()
            start = text.find(core, pos, pos + len(piece) + slack) if core else -1
            if start < 0:
                continue
            piece = core
        of[start : start + len(piece)] = k
        pos = start + len(piece)
    return of


def _match_blocks(text: str, pieces: list[str]) -> np.ndarray:
    joined = "".join(pieces)
    owner = np.repeat(np.arange(len(pieces)), [len(p) for p in pieces])
    of = np.full(len(text), -1)
    matcher = difflib.SequenceMatcher(None, joined, text, autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        of[b : b + size] = owner[a : a + size]
    return of


def logit_columns(text: str, tokens: list[str] | None, logits: list[float] | None) -> np.ndarray:
    """(characters x 3): minus the logit's z-score in the answer, its rank from the bottom, 1.

    The last column says the first two are evidence: all three are 0 when the item has no
    logits, when tokens and logits disagree in number, or when every logit is 0 (some
    Swedish test answers). One logit more than tokens is the end-of-sequence token, whose
    token some files leave out (English and German test): the extra logit is dropped.
    """
    n = len(text)
    out = np.zeros((n, len(LOGIT_FEATURES)))
    if tokens and logits and len(logits) == len(tokens) + 1:
        logits = logits[: len(tokens)]
    if not n or not tokens or not logits or len(tokens) != len(logits):
        return out
    values = np.asarray(logits, dtype=float)
    if not np.any(values) or not np.all(np.isfinite(values)):
        return out
    of = token_of_chars(text, tokens)
    covered = of >= 0
    z = (values - values.mean()) / (values.std() + 1e-6)
    low_rank = 1.0 - np.argsort(np.argsort(values)) / max(len(values) - 1, 1)
    out[covered, 0] = -z[of[covered]]
    out[covered, 1] = low_rank[of[covered]]
    out[covered, 2] = 1.0
    return out
