"""Detectors by name: built-in, registered in code, or from installed packages.

Built-in names map to "module:Class" so that listing detectors imports nothing heavy; a
detector's module (and its torch) is imported only when that detector is built. Your own
detector class registers with `@register_detector("name")`; a package registers one for
every user through the `mushroom.detectors` entry-point group
(`name = "package.module:Class"` in its pyproject), loaded only when asked for.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

from pydantic import ValidationError

from mushroom.detectors.base import Detector, DetectorOptions, Emit, ItemResult, VectorDetector
from mushroom.errors import DataError, MushroomError, Problem, did_you_mean
from mushroom.util.options import error_message, value_hint

__all__ = [
    "Detector",
    "DetectorOptions",
    "Emit",
    "ItemResult",
    "VectorDetector",
    "available",
    "build",
    "detector_class",
    "register_detector",
]

ENTRY_POINT_GROUP = "mushroom.detectors"

_BUILTIN: dict[str, str] = {
    "chain": "mushroom.detectors.chain:ChainDetector",
    "lexical": "mushroom.detectors.lexical:LexicalDetector",
    "llm": "mushroom.detectors.llm:LLMDetector",
    "nli": "mushroom.detectors.nli:NLIDetector",
    "pyes": "mushroom.detectors.pyes:PYesDetector",
    "semantic": "mushroom.detectors.semantic:SemanticDetector",
}
_REGISTERED: dict[str, type[Detector]] = {}


def register_detector(name: str):
    """Class decorator: makes a Detector subclass available under `name` (overrides a built-in)."""

    def wrap(cls: type[Detector]) -> type[Detector]:
        if not (isinstance(cls, type) and issubclass(cls, Detector)):
            raise TypeError(f"register_detector({name!r}) decorates a Detector subclass, not {cls!r}")
        cls.name = name
        _REGISTERED[name] = cls
        return cls

    return wrap


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available() -> list[str]:
    """Names of all detectors: built-in, registered and installed through entry points."""
    return sorted(set(_BUILTIN) | set(_REGISTERED) | set(_entry_points()))


def detector_class(name: str) -> type[Detector]:
    """The class registered under `name`, imported on demand."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name in _BUILTIN:
        module_name, _, class_name = _BUILTIN[name].partition(":")
        return getattr(importlib.import_module(module_name), class_name)
    eps = _entry_points()
    if name in eps:
        cls = eps[name].load()
        if not (isinstance(cls, type) and issubclass(cls, Detector)):
            raise MushroomError(f"entry point {name!r} ({eps[name].value}) is not a mushroom Detector")
        return cls
    names = available()
    raise MushroomError(
        f"unknown detector {name!r}{did_you_mean(name, names)}; available: {', '.join(names)}"
    )


def _settings_field(cls: type[Detector], field: str) -> bool:
    """Whether an option is a backend's settings (a table, set key by key on the command line)."""
    from mushroom.backends.config import BackendSettings

    annotation = cls.Options.model_fields[field].annotation if field in cls.Options.model_fields else None
    return isinstance(annotation, type) and issubclass(annotation, BackendSettings)


def _nested_hint(cls: type[Detector], key: str) -> str:
    """`base_url` given at the top: the backend's setting of that name is meant."""
    from mushroom.backends.config import BUILTIN_CONFIGS

    if "backend" in cls.Options.model_fields and any(key in c.model_fields for c in BUILTIN_CONFIGS.values()):
        return f" (a backend setting: -o backend.{key}=…)"
    return ""


def build(name: str, options: dict[str, Any] | DetectorOptions | None = None) -> Detector:
    """Builds a detector from validated options; unknown or invalid keys name what is valid."""
    cls = detector_class(name)
    if isinstance(options, DetectorOptions):
        return cls(options)
    options = dict(options or {})
    try:
        opts = cls.Options.model_validate(options)
    except ValidationError as exc:
        valid = ", ".join(cls.Options.model_fields)
        problems = []
        for err in exc.errors():
            where = ".".join(map(str, err["loc"]))
            msg = error_message(err) + value_hint(err)
            if err["type"] == "extra_forbidden":
                msg = f"unknown option{did_you_mean(str(err['loc'][-1]), list(cls.Options.model_fields))}"
                msg += _nested_hint(cls, str(err["loc"][-1])) + f"; {name} takes: {valid}"
            elif err["type"] == "missing":
                msg = f"required: give it as -o {where}=VALUE"
            elif (
                len(err["loc"]) == 1
                and _settings_field(cls, where)
                and not isinstance(err.get("input"), dict | str)  # a str is a kind: its own message
            ):
                msg = f"a table of settings: give them as -o {where}.kind=…, -o {where}.model=…"
            problems.append(Problem(f"detector {name}", None, where or None, msg))
        raise DataError(problems, exit_code=2, source="options") from None  # a usage error, not a bad file
    return cls(opts)
