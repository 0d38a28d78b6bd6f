"""LLM backends behind one batch interface; each library is imported only when used.

Backends are found by name (`registry`): the built-ins, classes decorated with
`@register_backend`, and third-party entry points in the group `mushroom.backends`. Each kind
has its own settings model (`config`), validated before anything heavy is imported.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from mushroom.backends.base import Backend
from mushroom.backends.config import (
    BackendConfig,
    BackendSettings,
    BuiltinBackendConfig,
    OpenAIConfig,
    ReplayConfig,
    TransformersConfig,
    VLLMConfig,
    parse_backend_config,
)
from mushroom.backends.registry import backend_class, backend_names, register_backend
from mushroom.errors import MushroomError

__all__ = [
    "Backend",
    "BackendConfig",
    "BackendSettings",
    "BuiltinBackendConfig",
    "OpenAIConfig",
    "ReplayConfig",
    "TransformersConfig",
    "VLLMConfig",
    "backend_names",
    "build_backend",
    "parse_backend_config",
    "register_backend",
]


def build_backend(config: BackendSettings | dict[str, Any]) -> Backend:
    """Builds the backend named by `config.kind`; bad settings or a missing library say what to do."""
    try:
        cfg = parse_backend_config(config)
    except ValidationError as exc:
        raise MushroomError(f"backend config: {exc}") from None
    except ValueError as exc:
        raise MushroomError(str(exc)) from None
    return backend_class(cfg.kind)(cfg)
