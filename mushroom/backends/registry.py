"""Backend names -> classes: built-ins imported lazily, `@register_backend`, and entry points.

Listing names and validating a config import nothing heavy: the built-ins' settings models
live in `backends.config` and their modules (torch, vllm, httpx) load only when a backend of
that kind is built. A third-party package adds a backend with an entry point in the group
`mushroom.backends` (`name = "package.module:BackendClass"`); the class names its settings
model in `config_class`. One `Registry` (mushroom.util.registry) holds them, with the extra
each built-in needs, so a missing engine is named the way a missing detector package is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from mushroom.errors import MissingExtra
from mushroom.util.registry import OPTIONAL_PACKAGES, Part, Registry

if TYPE_CHECKING:
    from mushroom.backends.base import Backend
    from mushroom.backends.config import BackendSettings

ENTRY_POINT_GROUP = "mushroom.backends"

_TORCH = ("torch", "transformers")

BACKENDS: Registry[type[Backend]] = Registry(
    "backend",
    [
        Part("replay", "mushroom.backends.replay:ReplayBackend"),
        Part("openai", "mushroom.backends.openai_compat:OpenAIBackend", "openai", ("httpx", "tenacity")),
        Part("transformers", "mushroom.backends.hf:TransformersBackend", "transformers", _TORCH),
        Part("vllm", "mushroom.backends.vllm_backend:VLLMBackend", "vllm", ("vllm",)),
    ],
    group=ENTRY_POINT_GROUP,
    cache_entry_points=True,
)
_REGISTERED = BACKENDS.registered  # the backends registered in code (the same dict)

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
        BACKENDS.add(name, cls)
        return cls

    return decorate


def backend_names() -> list[str]:
    """Every name accepted as `backend.kind` (imports no backend module)."""
    return BACKENDS.names()


def missing_library(name: str, library: str | None) -> MissingExtra:
    """The error for a built-in backend whose engine is not installed, naming the extra that installs it."""
    part = BACKENDS.builtins.get(name)
    extra = part.extra if part is not None else OPTIONAL_PACKAGES.get(library or "", ("", ""))[1]
    hint = None if extra else "reinstall mushroom"
    return MissingExtra(BACKENDS.what(name), library or "?", extra, hint=hint)


def backend_class(name: str) -> type[Backend]:
    """The class for `name`, importing its module now; a missing library names the extra."""
    return BACKENDS.load(name)


def registered_config_class(name: str) -> type[BackendSettings] | None:
    """The settings model of a backend registered in code or by entry point; None otherwise."""
    if name in BACKENDS.registered or name in BACKENDS.entry_points():
        return backend_class(name).config_class
    return None


def _clear_entry_point_cache() -> None:
    """For tests that install a distribution at run time."""
    BACKENDS.clear_cache()
