"""Backend names -> classes: built-ins imported lazily, `@register_backend`, and entry points.

Listing names and validating a config import nothing heavy: the built-ins' settings models
live in `backends.config` and their modules (torch, vllm, httpx) load only when a backend of
that kind is built. A third-party package adds a backend with an entry point in the group
`mushroom.backends` (`name = "package.module:BackendClass"`); the class names its settings
model in `config_class`.
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, TypeVar

from mushroom.errors import MushroomError

if TYPE_CHECKING:
    from mushroom.backends.base import Backend
    from mushroom.backends.config import BackendSettings

ENTRY_POINT_GROUP = "mushroom.backends"

# name -> (module:Class, the extra that installs its library)
_BUILTIN: dict[str, tuple[str, str]] = {
    "replay": ("mushroom.backends.replay:ReplayBackend", ""),
    "openai": ("mushroom.backends.openai_compat:OpenAIBackend", "openai"),
    "transformers": ("mushroom.backends.hf:TransformersBackend", "transformers"),
    "vllm": ("mushroom.backends.vllm_backend:VLLMBackend", "vllm"),
}
_REGISTERED: dict[str, type[Backend]] = {}

B = TypeVar("B", bound="type[Backend]")


def register_backend(name: str, config: type[BackendSettings] | None = None):
    """Class decorator: makes a Backend subclass buildable as `kind = name`.

    Args:
        name: the `kind` users write.
        config: its settings model (a BackendSettings subclass with `kind: Literal[name]`);
            default: the class's own `config_class`.
    """

    def decorate(cls: B) -> B:
        cls.kind = name
        if config is not None:
            cls.config_class = config
        _REGISTERED[name] = cls
        return cls

    return decorate


@cache
def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def backend_names() -> list[str]:
    """Every name accepted as `backend.kind` (imports no backend module)."""
    return sorted(set(_BUILTIN) | set(_REGISTERED) | set(_entry_points()))


def missing_library(name: str, library: str | None) -> MushroomError:
    """The error for a built-in backend whose engine is not installed, naming the extra that installs it."""
    extra = _BUILTIN[name][1] if name in _BUILTIN else ""
    hint = f"pip install 'mushroom[{extra}]'" if extra else "reinstall mushroom"
    return MushroomError(f"backend {name!r} needs {library!r}, which is not installed: {hint}")


def _unknown(name: str) -> MushroomError:
    from mushroom.util.words import suggest

    return MushroomError(f"unknown backend {name!r}{suggest(name, backend_names())}")


def backend_class(name: str) -> type[Backend]:
    """The class for `name`, importing its module now; a missing library names the extra."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name in _BUILTIN:
        target = _BUILTIN[name][0]
        module_name, _, class_name = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise missing_library(name, exc.name) from exc
        return _REGISTERED.get(name) or getattr(module, class_name)
    ep = _entry_points().get(name)
    if ep is None:
        raise _unknown(name)
    try:
        cls = ep.load()
    except ImportError as exc:
        dist = ep.dist.name if ep.dist is not None else ep.value
        raise MushroomError(
            f"backend {name!r} (from {dist}) needs {exc.name!r}, which is not installed: "
            f"reinstall {dist} with its dependencies"
        ) from exc
    _REGISTERED[name] = cls
    return cls


def registered_config_class(name: str) -> type[BackendSettings] | None:
    """The settings model of a backend registered in code or by entry point; None otherwise."""
    if name in _REGISTERED or name in _entry_points():
        return backend_class(name).config_class
    return None


def _clear_entry_point_cache() -> None:
    """For tests that install a distribution at run time."""
    _entry_points.cache_clear()
