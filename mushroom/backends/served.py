"""Which server answers at a URL, and which model it serves, asked before a run sends its items.

A mistyped port, a URL without /v1, a web page where an API should be, or a one-model server
started under another name each failed every item only after the CPU work; these checks say
so first, in one line.
"""

from __future__ import annotations

import os
import re
from typing import Any

import httpx

from mushroom.backends.config import OpenAIConfig
from mushroom.errors import MODEL_FLAG, MushroomError


def exception_detail(exc: Exception) -> str:
    """`: [Errno 111] Connection refused`, or nothing when the exception says nothing."""
    text = str(exc).strip()
    return f": {text}" if text else ""


def _is_json(response: httpx.Response) -> bool:
    try:
        response.json()
    except ValueError:
        return False
    return True


def served_models(listing: Any) -> list[str]:
    """The model ids of a `GET /v1/models` answer (none for anything else)."""
    data = listing.get("data") if isinstance(listing, dict) else None
    return [m["id"] for m in data or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]


def _model_names(name: str) -> set[str]:
    """The names a served model id goes by: itself, its last path part, without Ollama's `:latest`."""
    names = {name, name.rsplit("/", 1)[-1]}
    return names | {n.removesuffix(":latest") for n in names}


def is_served(model: str, ids: list[str]) -> bool:
    """Whether `model` names one of `ids`, in full or as the server's own short forms.

    Its last path part (a .gguf's file name, llama.cpp lists the path) and the name without
    the tag Ollama adds (`llama3.2` for `llama3.2:latest`) count.
    """
    wanted = _model_names(model)
    return any(wanted & _model_names(i) for i in ids)


_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{4}|\d{8})$")


def same_model(asked: str, replied: str) -> bool:
    """Whether a reply's `model` names the model asked for, as servers write it.

    Beside `is_served`'s short forms: another case (`Qwen/Qwen2.5-7B-Instruct` answered as
    `qwen2.5-7b-instruct`) and a dated snapshot (OpenAI answers `gpt-4o-mini` as
    `gpt-4o-mini-2024-07-18`): both were warned of as another model (a review).
    """
    if is_served(asked, [replied]):
        return True
    wanted = {name.casefold() for name in _model_names(asked)}
    return any(
        name.casefold() in wanted or _SNAPSHOT.sub("", name).casefold() in wanted
        for name in _model_names(replied)
    )


def auth_headers(config: OpenAIConfig) -> dict[str, str]:
    """The bearer token from `config.api_key_env`, when that variable is set."""
    key = os.environ.get(config.api_key_env)
    return {"Authorization": f"Bearer {key}"} if key else {}


def check_served_model(config: OpenAIConfig) -> None:
    """Raises MushroomError when a one-model server does not list `config.model`.

    llama.cpp's servers answer with their one model whatever name a request gives, so a
    mistyped `--model` ran and every record, cache key and report named a model that never
    answered. A server that lists several models is left to answer for itself (one that
    routes by name refuses a name it does not serve; Ollama and routers accept names they
    do not list): the backend warns then. A server that cannot be reached or lists nothing
    passes: the run counts its failed requests as it would without this check. One that takes
    the connection and answers nothing is hung: each request would wait out its timeout.
    """
    base = str(config.base_url).rstrip("/")
    try:
        response = httpx.get(f"{base}/models", headers=auth_headers(config), timeout=config.connect_timeout_s)
        if response.status_code == 404 and not base.endswith("/v1"):
            # `--base-url http://host:8000` without /v1: every request would 404 and fail
            again = httpx.get(
                f"{base}/v1/models", headers=auth_headers(config), timeout=config.connect_timeout_s
            )
            if again.status_code == 200:
                raise MushroomError(f"--base-url {base} is not the server's API, {base}/v1 is: give that URL")
        if response.status_code == 200 and response.text.strip() and not _is_json(response):
            # a web page (a login, a proxy's, another app's): every request fails, after the CPU work
            shown = " ".join(response.text.split())[:80]
            raise MushroomError(
                f"{base}/models answered with a body that is not JSON (it begins {shown!r}): no "
                "OpenAI-compatible API is there; give the server's base URL (its port, and /v1), "
                "e.g. http://127.0.0.1:8000/v1"
            )
        ids = served_models(response.json()) if response.status_code == 200 else []
    except httpx.ReadTimeout:
        raise MushroomError(hung_message(base, "GET /models", config.connect_timeout_s)) from None
    except (httpx.HTTPError, ValueError):
        return
    if len(ids) == 1 and not is_served(config.model, ids):
        raise MushroomError(
            f"the server at {config.base_url} serves only {ids[0]!r}, not {config.model!r}, and would answer "
            f"with it under the wrong name; give that name ({MODEL_FLAG}), or name the model when starting "
            "the server: --model_alias NAME for llama-cpp-python, --alias NAME for llama-server"
        )


def unreachable(config: OpenAIConfig) -> str | None:
    """Why nothing listens at the server's URL (connection refused, no such host), or None.

    `check_served_model` lets such a server pass: answers in a response cache still serve.
    A job that first spends minutes on CPU members asks this for a new folder, where no cached
    answer can serve: a mistyped port failed every item only after them.
    """
    base = str(config.base_url).rstrip("/")
    try:
        httpx.get(f"{base}/models", headers=auth_headers(config), timeout=config.connect_timeout_s)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        return f"nothing answers at {base} ({type(exc).__name__}{exception_detail(exc)})"
    except httpx.HTTPError:
        return None  # it answered, or took the connection: the run says what follows
    return None


def hung_message(url: str, asked: str, seconds: float) -> str:
    """Why a server that took the connection and answered nothing is taken as hung, and what to do."""
    return (
        f"the server at {url} took the connection but answered no {asked} within {seconds} s: it is hung, "
        "or busy with another client's requests (llama.cpp's server answers one at a time; a run you "
        "just stopped leaves its requests running there until they end); if nothing else uses it, wait "
        "or restart it (or raise -o backend.connect_timeout_s if it is only slow)"
    )
