"""What every detector is: options in, a batch of items and their contexts, predictions out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from mushroom.records import Context, Item, Prediction


class DetectorOptions(BaseModel):
    """Base for detector options: unknown keys are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class Detector(ABC):
    """A hallucination detector.

    Detectors take a whole batch so that model-backed ones can send every prompt at once; the
    `advance` callback lets the caller drive a progress bar without the detector knowing how.
    """

    name: ClassVar[str]
    Options: ClassVar[type[DetectorOptions]] = DetectorOptions

    def __init__(self, options: DetectorOptions):
        self.options = options
        # Where a detector keeps raw model outputs and caches; set by the pipeline per run.
        self.workdir: Path | None = None
        # Evidence beyond the final probabilities (item id -> name -> per-character vector),
        # filled by detectors that have any; the pipeline writes it for `stack`.
        self.channels: dict[str, dict[str, np.ndarray]] = {}

    @abstractmethod
    def detect(
        self,
        items: list[Item],
        contexts: dict[str, list[Context]],
        advance: Callable[[int], None] | None = None,
    ) -> list[Prediction]:
        """One prediction per item, in the order of `items`."""

    def describe(self) -> dict[str, Any]:
        """Name and options, recorded in every run's config."""
        return {"detector": self.name, "options": self.options.model_dump(mode="json")}


class VectorDetector(Detector):
    """A detector that scores one item at a time as a per-character probability vector.

    Hard labels are the characters above the `threshold` option, which every subclass's
    options carry.
    """

    @abstractmethod
    def item_vector(self, item: Item, contexts: list[Context]) -> np.ndarray:
        """Per-character hallucination probability of one answer."""

    def detect(
        self,
        items: list[Item],
        contexts: dict[str, list[Context]],
        advance: Callable[[int], None] | None = None,
    ) -> list[Prediction]:
        from mushroom.predictions import prediction_from_vectors

        threshold = self.options.threshold
        out = []
        for item in items:
            vec = self.item_vector(item, contexts.get(item.id, []))
            out.append(prediction_from_vectors(item.id, vec, vec > threshold))
            if advance is not None:
                advance(1)
        return out
