"""Detectors by name.

The registry maps a name to "module:Class" so that listing detectors imports nothing heavy;
a detector's module (and its torch or vllm) is imported only when that detector is built.
"""

from __future__ import annotations

import importlib
from typing import Any

from mushroom.detectors.base import Detector
from mushroom.errors import MushroomError

_REGISTRY: dict[str, str] = {
    "chain": "mushroom.detectors.chain:ChainDetector",
    "lexical": "mushroom.detectors.lexical:LexicalDetector",
    "llm": "mushroom.detectors.llm:LLMDetector",
    "nli": "mushroom.detectors.nli:NLIDetector",
    "pyes": "mushroom.detectors.pyes:PYesDetector",
    "semantic": "mushroom.detectors.semantic:SemanticDetector",
}


def register(name: str, target: str) -> None:
    """Adds a detector ("module:Class") under a name; later registrations override."""
    _REGISTRY[name] = target


def available() -> list[str]:
    """Names of all registered detectors."""
    return sorted(_REGISTRY)


def detector_class(name: str) -> type[Detector]:
    """Imports and returns the class registered under `name`."""
    try:
        target = _REGISTRY[name]
    except KeyError:
        raise MushroomError(f"unknown detector {name!r}; available: {', '.join(available())}") from None
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def build(name: str, options: dict[str, Any] | None = None) -> Detector:
    """Builds a detector from validated options (unknown keys are rejected)."""
    cls = detector_class(name)
    return cls(cls.Options.model_validate(options or {}))
