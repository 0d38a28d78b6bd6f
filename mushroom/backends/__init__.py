"""LLM backends behind one batch interface; each library is imported only when used."""

from __future__ import annotations

import importlib
from typing import Any

from mushroom.backends.base import Backend, BackendConfig
from mushroom.errors import MushroomError

_BACKENDS: dict[str, tuple[str, str]] = {
    "replay": ("mushroom.backends.replay:ReplayBackend", ""),
    "openai": ("mushroom.backends.openai_compat:OpenAIBackend", "openai"),
    "transformers": ("mushroom.backends.hf:TransformersBackend", "transformers"),
    "vllm": ("mushroom.backends.vllm_backend:VLLMBackend", "vllm"),
}


def backend_names() -> list[str]:
    """Names accepted in `backend.kind`."""
    return sorted(_BACKENDS)


def build_backend(config: BackendConfig | dict[str, Any]) -> Backend:
    """Builds the backend named by `config.kind`; a missing library names the extra to install."""
    cfg = config if isinstance(config, BackendConfig) else BackendConfig.model_validate(config)
    try:
        target, extra = _BACKENDS[cfg.kind]
    except KeyError:
        raise MushroomError(
            f"unknown backend {cfg.kind!r}; choose one of {', '.join(backend_names())}"
        ) from None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"pip install 'mushroom[{extra}]'" if extra else "reinstall mushroom"
        raise MushroomError(
            f"backend {cfg.kind!r} needs {exc.name!r}, which is not installed: {hint}"
        ) from exc
    return getattr(module, class_name)(cfg)
