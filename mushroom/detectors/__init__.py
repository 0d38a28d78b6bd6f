"""Detectors by name: built-in, registered in code, or from installed packages.

Built-in names map to "module:Class" in one `Registry` (mushroom.util.registry), so that
listing detectors imports nothing heavy; a detector's module (and its torch) is imported only
when that detector is built, and a missing optional package is named with its extra
(`MissingExtra`, exit 4) before a run starts. Your own detector class registers with
`@register_detector("name")`; a package registers one for every user through the
`mushroom.detectors` entry-point group (`name = "package.module:Class"` in its pyproject),
loaded only when asked for.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from mushroom.detectors.base import (
    Detector,
    DetectorOptions,
    Emit,
    ItemResult,
    VectorDetector,
    backend_settings,
)
from mushroom.errors import DataError, MushroomError, Problem, did_you_mean
from mushroom.util.options import error_message, field_errors, given_value, value_hint
from mushroom.util.registry import Part, Registry

__all__ = [
    "DETECTORS",
    "Detector",
    "DetectorOptions",
    "Emit",
    "ItemResult",
    "VectorDetector",
    "available",
    "build",
    "calls_model",
    "detector_class",
    "register_detector",
]

ENTRY_POINT_GROUP = "mushroom.detectors"

_ENCODER = ("torch", "transformers")  # what a detector that runs a transformers model imports


def _a_detector(name: str, cls: Any, target: str) -> type[Detector]:
    if not (isinstance(cls, type) and issubclass(cls, Detector)):
        raise MushroomError(f"entry point {name!r} ({target}) is not a mushroom Detector")
    return cls


DETECTORS: Registry[type[Detector]] = Registry(
    "detector",
    [
        Part("chain", "mushroom.detectors.chain:ChainDetector"),
        Part("lexical", "mushroom.detectors.lexical:LexicalDetector"),
        Part("llm", "mushroom.detectors.llm:LLMDetector"),
        Part("nli", "mushroom.detectors.nli:NLIDetector", "transformers", _ENCODER),
        Part("pyes", "mushroom.detectors.pyes:PYesDetector"),
        Part("semantic", "mushroom.detectors.semantic:SemanticDetector", "semantic", _ENCODER),
    ],
    group=ENTRY_POINT_GROUP,
    check=_a_detector,
)
"""Every detector by name; the model-backed ones need what their backend needs (see `build`)."""


def register_detector(name: str):
    """Class decorator: makes a Detector subclass available under `name` (overrides a built-in)."""

    def wrap(cls: type[Detector]) -> type[Detector]:
        if not (isinstance(cls, type) and issubclass(cls, Detector)):
            raise TypeError(f"register_detector({name!r}) decorates a Detector subclass, not {cls!r}")
        cls.name = name
        return DETECTORS.add(name, cls)

    return wrap


def available() -> list[str]:
    """Names of all detectors: built-in, registered and installed through entry points."""
    return DETECTORS.names()


def detector_class(name: str) -> type[Detector]:
    """The class registered under `name`, imported on demand."""
    if name not in DETECTORS:
        names = available()
        raise MushroomError(
            f"unknown detector {name!r}{did_you_mean(name, names)}; available: {', '.join(names)}"
        )
    return DETECTORS.load(name)


def calls_model(name: str | None) -> bool:
    """Whether the detector called `name` calls a model (`Detector.calls_model`).

    False for None and for a name that cannot be loaded here (an unknown or uninstalled
    detector of a member run made elsewhere): such a member is treated as the cheap kind.
    """
    if name is None:
        return False
    try:
        return bool(detector_class(name).calls_model)
    except MushroomError:
        return False


def reads_contexts(name: str) -> bool:
    """Whether the detector called `name` checks answers against contexts (False when unknown)."""
    return name in available() and bool(detector_class(name).needs_contexts)


def check_installed(name: str, options: DetectorOptions) -> None:
    """Raises MissingExtra for a package the detector or one of its backends needs and lacks.

    A model-backed detector needs what the backend kinds in its options need (httpx for
    `openai`, vllm for `vllm`), whether or not its answers come from a cache: a missing
    package is found here, before a run folder is made, rather than on the first item.
    """
    from mushroom.backends.registry import BACKENDS

    DETECTORS.check_installed(name)
    for field, _, setting in backend_settings(options):
        kind = setting.kind
        BACKENDS.check_installed(kind, f"{BACKENDS.what(kind)} ({name} option {field})")


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


def other_detectors_option(key: str, name: str) -> str:
    """` (an option of chain, not of llm)` for an option only other detectors take, else "".

    `decompose_prompt` given to llm was "unknown option", and `verify_prompt` was told only
    "did you mean 'prompt'?": both are chain's. Said after a close name of this detector's
    (`temperature` is chain's, and llm's `temperatures` is likelier meant).
    """
    if key in detector_class(name).Options.model_fields:
        return ""
    owners = [
        other for other in available() if other != name and key in detector_class(other).Options.model_fields
    ]
    return f" (an option of {', '.join(owners)}, not of {name})" if owners else ""


def _prefix_hint(name: str, err: Any) -> str:
    """`-o lexical.threshold=0.2` to one lexical detector: the option without its detector's name."""
    given = err.get("input")
    if str(err["loc"][0]) == name and isinstance(given, dict) and len(err["loc"]) == 1:
        first = next(iter(given), "KEY")
        return f" (this command runs {name} alone: give its options without the prefix, -o {first}=…)"
    return ""


def build(name: str, options: dict[str, Any] | DetectorOptions | None = None) -> Detector:
    """Builds a detector from validated options; unknown or invalid keys name what is valid."""
    cls = detector_class(name)
    if isinstance(options, DetectorOptions):
        check_installed(name, options)
        return cls(options)
    options = dict(options or {})
    try:
        opts = cls.Options.model_validate(options)
    except ValidationError as exc:
        valid = ", ".join(cls.Options.model_fields)
        problems = []
        for err in field_errors(exc.errors()):
            where = ".".join(map(str, err["loc"]))
            msg = error_message(err) + given_value(err) + value_hint(err)
            if err["type"] == "extra_forbidden":
                key = str(err["loc"][-1])
                owned = other_detectors_option(key, name) if len(err["loc"]) == 1 else ""
                msg = "unknown option" + did_you_mean(key, list(cls.Options.model_fields)) + owned
                msg += (
                    _nested_hint(cls, str(err["loc"][-1]))
                    + _prefix_hint(name, err)
                    + f"; {name} takes: {valid}"
                )
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
    check_installed(name, opts)
    return cls(opts)
