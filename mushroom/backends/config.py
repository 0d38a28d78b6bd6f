"""Typed backend settings: one pydantic model per backend kind, chosen by `kind`.

A run config's `backend` table is validated against the model of its kind only, so a setting
that means nothing for that kind (`batch_size` for a server) is an error that lists the kind's
valid keys instead of being silently ignored. The kinds form a tagged union on `kind` that is
open: a backend registered with `@register_backend` or through the `mushroom.backends` entry
point group brings its own settings model (a subclass of `BackendSettings`).

`BackendConfig` is the annotation to use on a pydantic field (it dispatches dicts to the
right model and dumps every field of the chosen one); calling it, as in
`BackendConfig(kind="openai", base_url=...)`, also builds the model of that kind, so code that
constructed the old flat config keeps working.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializeAsAny,
    StrictBool,
    field_validator,
    model_validator,
)

from mushroom.errors import MushroomError
from mushroom.util.files import NAMES_A_FILE

DAY_S = 86400.0  # the longest timeout taken
NEEDS_BASE_URL = "the openai backend needs `base_url` (--base-url), e.g. http://127.0.0.1:8000/v1"
NEEDS_SERVED_MODEL = "the openai backend needs `model` (--model), the served model's name"
NEEDS_RESPONSES = (
    "the replay backend (the default of LLM detectors) needs `responses`, a JSONL file of recorded "
    "responses (--responses FILE, or -o backend.responses=FILE; for a stack's member, "
    "-o llm.backend.responses=FILE); or name a live backend (--backend openai|transformers|vllm, "
    "or -o backend.kind=openai)"
)

StructuredOutput = Literal["auto", "json_schema", "json_object", "guided_json", "none"]


# The variable the key is read from unless `api_key_env` names another; unset for a local
# server that needs no key
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


TRANSPORT_KEYS = frozenset(
    {
        "base_url",
        "concurrency",
        "timeout_s",
        "connect_timeout_s",
        "max_retries",
        "retry_budget_s",
        "retry_timeouts",
        "circuit_breaker",
        "api_key_env",
        "batch_size",
        "device",
    }
)
"""Settings that change how answers are fetched, not what they are.

A run folder may be resumed with others (a restarted server on another port, more
concurrency), and a response cache answers across them. The device is one of them: greedy
SmolLM2 wrote the same 16 replies on an H200 as on the CPU.
"""


# `extra` keys of an in-process engine (vllm.LLM, from_pretrained) that say where and in how
# much memory a model runs, not what it answers: lowering gpu_memory_utilization to make vLLM
# fit must not ask every cached request again (not max_model_len: vLLM cuts replies at it)
LOAD_EXTRAS = frozenset(
    {
        "gpu_memory_utilization",
        "max_num_seqs",
        "max_num_batched_tokens",
        "swap_space",
        "cpu_offload_gb",
        "enforce_eager",
        "enable_prefix_caching",
        "disable_log_stats",
        "download_dir",
        "low_cpu_mem_usage",
        "local_files_only",
        "cache_dir",
        "device_map",
    }
)
DTYPE_NAMES = {"half": "float16", "float": "float32"}
"""One name per dtype: `half` and `float16` load the same weights."""


def answer_settings(config: BackendSettings) -> dict[str, Any]:
    """The settings besides kind and model that change answers and differ from their defaults.

    Only those set away from the default are named, so a cache written before they were keyed
    still answers a backend at its defaults; one written with other settings is asked again.
    """
    dumped = config.model_dump(mode="json", exclude_defaults=True)
    out = {k: v for k, v in dumped.items() if k not in TRANSPORT_KEYS | {"kind", "model", "responses"}}
    if "dtype" in out:
        out["dtype"] = DTYPE_NAMES.get(out["dtype"], out["dtype"])
    if config.kind != "openai" and isinstance(out.get("extra"), dict):  # a server's extra is the request's
        out["extra"] = {k: v for k, v in out["extra"].items() if k not in LOAD_EXTRAS}
        if not out["extra"]:
            del out["extra"]
    return out


class BackendSettings(BaseModel):
    """Settings every backend kind has; each kind subclasses it with a `Literal` kind."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="replay, openai, transformers, vllm or a registered name")
    model: str = Field("", description="model name, path or registry name (mushroom models list)")

    def __new__(cls, *args: Any, **data: Any) -> BackendSettings:
        # `BackendSettings(kind="openai", ...)` builds the model registered for that kind.
        if cls is BackendSettings and isinstance(data.get("kind"), str):
            target = config_class_or_none(data["kind"])
            if target is not None and target is not cls:
                return super().__new__(target)
        return super().__new__(cls)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> BackendSettings:
        # as `__new__`: the base class validates a dict as the model of its kind
        if cls is BackendSettings and isinstance(obj, dict) and isinstance(obj.get("kind"), str):
            target = config_class_or_none(obj["kind"])
            if target is not None and target is not cls:
                return target.model_validate(obj, **kwargs)
        return super().model_validate(obj, **kwargs)

    def check_ready(self) -> None:
        """Raises MushroomError for what is missing that the backend would fail on once built.

        Run before a run folder is made, so that a command missing its server URL, responses
        file or model file stops with the same message the backend would give, and leaves no
        folder. Unlike validation it looks at the file system, so it is not part of reading a
        config (an old run's config.json stays readable after its model file moved).
        """

    def check_answers(self) -> None:
        """Raises MushroomError when the model cannot write answers to a prompt (llm, chain, contexts).

        Scoring given text (pyes) needs no chat template; writing an answer does.
        """

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(cls.model_fields))
            if unknown:
                from mushroom.util.words import suggest

                kind = data.get("kind", "?")
                raise ValueError(
                    f"the {kind!r} backend has no setting {', '.join(map(repr, unknown))}"
                    + suggest(unknown[0], list(cls.model_fields), "its settings are")
                    + _others_wrong(cls, {k: v for k, v in data.items() if k not in unknown})
                )
        return data


class ReplayConfig(BackendSettings):
    """Answers from recorded raw records; `model`, when given, keeps only that model's rows."""

    kind: Literal["replay"] = "replay"
    responses: str | None = Field(
        None, description="JSONL of recorded responses (raw records)", json_schema_extra=NAMES_A_FILE
    )

    def check_ready(self) -> None:
        """The responses file must exist and every line hold something to replay."""
        if not self.responses:
            raise MushroomError(NEEDS_RESPONSES)
        if not Path(self.responses).is_file():
            from mushroom.data.jsonl import refuse_irregular

            refuse_irregular(Path(self.responses))  # a device or pipe was "no such file"
            what = "a folder, not a JSONL file" if Path(self.responses).is_dir() else "no such file"
            # a config run from another folder: its relative paths are not the config's folder's
            where = (
                "" if Path(self.responses).is_absolute() else f"; a relative path is read from {Path.cwd()}"
            )
            raise MushroomError(f"{self.responses}: {what} (the replay backend's `responses`{where})")
        from mushroom.backends.registry import backend_class

        backend_class(self.kind).check_config(self)  # a broken line is named now, not per item later


class OpenAIConfig(BackendSettings):
    """An OpenAI-compatible server (vLLM, llama.cpp, Ollama, TGI); the defaults suit a one-slot CPU server."""

    kind: Literal["openai"] = "openai"
    base_url: str | None = Field(None, description="server URL, e.g. http://127.0.0.1:8000/v1")
    api_key_env: str = Field(DEFAULT_KEY_ENV, description="environment variable holding the key")
    concurrency: int | Literal["auto"] = Field(
        "auto", description="requests in flight; auto: the server's slots, 32 for vLLM, else 1"
    )
    # at most a day: an infinite timeout passed the check and failed every request (OverflowError)
    timeout_s: float = Field(
        600.0, gt=0, le=DAY_S, description="read timeout per request (CPU servers are slow)"
    )
    connect_timeout_s: float = Field(
        10.0, gt=0, le=DAY_S, description="to connect, and to answer a status check (GET /models, /health)"
    )
    max_retries: int = Field(5, ge=0, description="for 429, 5xx (not validation errors), lost connections")
    retry_budget_s: float = Field(
        90.0, gt=0, le=DAY_S, description="one request's retries end within this time (waits capped at 30 s)"
    )
    # strict, as a detector's yes/no options in a config: "no" in quotes (or YAML's bare no,
    # text in YAML 1.2) is a slip to name, not a False read in silence
    circuit_breaker: StrictBool = Field(
        True,
        description="stop sending after 3 failed requests while none has worked, or 10 failed in a row "
        "after some did; the rest fail unsent and a re-run retries them",
    )
    retry_timeouts: StrictBool = Field(
        False, description="resend after a read timeout (off: the server may still be running it)"
    )
    structured_output: StructuredOutput = Field(
        "auto", description="how the JSON schema is sent; auto falls back until the server accepts one"
    )
    loglikelihood_template: Literal["auto", "chatml", "plain"] = Field(
        "auto", description="chat rendering for /completions scoring; auto: the server's, else plain"
    )
    extra: dict[str, Any] = Field(default_factory=dict, description="added to every request body")

    def check_settings(self) -> None:
        """A server URL and the served model's name are needed for every request.

        So is the key of an `api_key_env` given: unset, every request went without it (the
        default, OPENAI_API_KEY, may be unset for a server that needs no key).
        """
        if not self.base_url:
            from mushroom.models.zoo import REGISTRY

            # `--model smollm2` alone: a model that runs in process here, not a server's
            local = (
                f"; {self.model!r} runs here with --backend transformers" if self.model in REGISTRY else ""
            )
            raise MushroomError(NEEDS_BASE_URL + local)
        if not self.model:
            raise MushroomError(NEEDS_SERVED_MODEL)
        # not the default: a run's saved config names it whether it was given or not
        if self.api_key_env != DEFAULT_KEY_ENV and not os.environ.get(self.api_key_env):
            raise MushroomError(
                f"backend.api_key_env {self.api_key_env}: that environment variable is not set; export "
                "it, or leave api_key_env out for a server that needs no key"
            )

    def check_ready(self) -> None:
        """The settings, and that a server which lists its models serves this one."""
        self.check_settings()
        from mushroom.backends.registry import backend_class

        backend_class(self.kind).check_config(self)

    @field_validator("structured_output", mode="before")
    @classmethod
    def _old_bool(cls, value: Any) -> Any:
        # the flat config had `structured_output = true/false`
        if isinstance(value, bool):
            return "auto" if value else "none"
        return value

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if not value:  # unset: the backend says it needs one
            return None
        from urllib.parse import urlsplit  # not httpx: validating a config imports no extra

        example = "e.g. http://127.0.0.1:8000/v1"
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http(s) URL; {example}")
        try:
            url = urlsplit(value)
            port = url.port  # raises for a port that is no number, or out of range
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a valid URL ({exc}); {example}") from None
        if not url.hostname:
            raise ValueError(f"{value!r} names no host; {example}")
        if port == 0:
            raise ValueError(f"{value!r}: port 0 is no port; {example}")
        endpoint = next(
            (e for e in ("/chat/completions", "/completions") if url.path.rstrip("/").endswith(e)), None
        )
        if (
            endpoint is not None
        ):  # the client adds the endpoint: it asked for .../chat/completions/chat/completions
            base = url._replace(path=url.path.rstrip("/")[: -len(endpoint)], query="", fragment="").geturl()
            raise ValueError(f"{value!r} names an endpoint; give the server's base URL: {base}")
        return value

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError("concurrency must be >= 1 or 'auto'")
        return value


class WeightsConfig(BackendSettings):
    """Settings of a backend that loads a model's weights in process: it needs a usable model."""

    @model_validator(mode="after")
    def _loadable(self) -> WeightsConfig:
        from mushroom.models.zoo import check_model_name

        check_model_name(self.model, self.kind)
        return self

    # the libraries its engine imports when the model is loaded (the registry names their extra)
    libraries: ClassVar[tuple[str, ...]] = ()

    def check_ready(self) -> None:
        """Its engine must be installed and a `.gguf` path a GGUF file (a registry name is pulled)."""
        import importlib.util

        from mushroom.models.zoo import check_model_folder, gguf_path

        missing = [name for name in self.libraries if importlib.util.find_spec(name) is None]
        if missing:
            from mushroom.backends.registry import missing_library

            raise missing_library(self.kind, missing[0])
        gguf_path(self.model)
        check_model_folder(self.model)
        device = getattr(self, "device", None)
        if device is not None:
            from mushroom.models.devices import check_device

            check_device(device, "device")

    def check_answers(self) -> None:
        """A registry model without a chat template is refused before its download.

        gemma3-270m (a base model, for P(yes) scoring) was pulled (253 MB) and wrote 1024 tokens
        of nothing per item when asked for JSON.
        """
        from mushroom.models.zoo import REGISTRY

        entry = REGISTRY.get(self.model)
        if entry is not None and not entry.chat:
            chat = ", ".join(name for name, e in sorted(REGISTRY.items()) if e.chat)
            raise MushroomError(
                f"{entry.name} is a base model without a chat template, for scoring only (--detector pyes); "
                f"to generate answers use a chat model: {chat}"
            )


DTYPES = ("auto", "bfloat16", "float16", "float32", "half", "float")
"""The weights' dtypes both engines take: `auto` keeps the checkpoint's, half = float16, float = float32."""


def _known_dtype(value: str | None) -> str | None:
    if value is not None and value not in DTYPES:
        raise ValueError(
            f"dtype {value!r}: one of {', '.join(DTYPES)} (a quantized model is chosen by its file, not here)"
        )
    return value


Dtype = Annotated[str | None, AfterValidator(_known_dtype)]


class TransformersConfig(WeightsConfig):
    """A causal LM loaded in process with transformers."""

    kind: Literal["transformers"] = "transformers"
    libraries: ClassVar[tuple[str, ...]] = ("torch", "transformers")
    device: str | None = Field(None, description="cpu, cuda, ... (default: cuda if available)")
    dtype: Dtype = Field(None, description=f"weights dtype: {', '.join(DTYPES)} (default: the engine's)")
    batch_size: int = Field(
        8,
        ge=1,
        description="prompts per forward batch (seeded sampling runs one at a time, the same in any batch)",
    )
    structured_output: StrictBool = Field(True, description="constrain decoding to the request's JSON schema")
    extra: dict[str, Any] = Field(default_factory=dict, description="passed to from_pretrained as is")


class VLLMConfig(WeightsConfig):
    """vLLM's offline engine in process."""

    kind: Literal["vllm"] = "vllm"
    libraries: ClassVar[tuple[str, ...]] = ("vllm",)
    dtype: Dtype = Field(None, description=f"weights dtype: {', '.join(DTYPES)} (default: the engine's)")
    structured_output: StrictBool = Field(True, description="guided JSON decoding with the request's schema")
    extra: dict[str, Any] = Field(default_factory=dict, description="passed to vllm.LLM as is")


BUILTIN_CONFIGS: dict[str, type[BackendSettings]] = {
    "replay": ReplayConfig,
    "openai": OpenAIConfig,
    "transformers": TransformersConfig,
    "vllm": VLLMConfig,
}


BuiltinBackendConfig = Annotated[
    ReplayConfig | OpenAIConfig | TransformersConfig | VLLMConfig, Field(discriminator="kind")
]
"""The built-in kinds as a closed union tagged by `kind` (what the JSON schema shows)."""


def config_class_or_none(name: str) -> type[BackendSettings] | None:
    """The settings model of `name`, or None for a name nobody registered."""
    if name in BUILTIN_CONFIGS:
        return BUILTIN_CONFIGS[name]
    from mushroom.backends.registry import registered_config_class

    return registered_config_class(name)


def parse_backend_config(value: BackendSettings | dict[str, Any]) -> BackendSettings:
    """The settings model of `value["kind"]`, validated; an unknown kind lists the known ones.

    An instance already of its kind's model is returned as is; a base-class instance of a
    registered kind is validated again against that kind's model.
    """
    from mushroom.backends.registry import backend_names

    if isinstance(value, BackendSettings):
        target = config_class_or_none(value.kind)
        if target is None or isinstance(value, target):
            return value
        return target.model_validate(value.model_dump(exclude_unset=True) | {"kind": value.kind})
    if not isinstance(value, dict):
        raise ValueError(f"a backend config is a table with a `kind`, not {type(value).__name__}")
    kind = value.get("kind")
    if not isinstance(kind, str):
        raise ValueError(f"a backend config needs `kind`: one of {', '.join(backend_names())}")
    target = config_class_or_none(kind)
    if target is None:
        from mushroom.util.words import suggest

        raise ValueError(f"unknown backend {kind!r}{suggest(kind, backend_names())}{_read_as_meant(value)}")
    return target.model_validate(value)


def _others_wrong(cls: type[BackendSettings], known: dict[str, Any]) -> str:
    """The mistakes in the settings a backend has, said beside an unknown one's.

    pydantic stops at the unknown key: `concurrency=abc` beside `temprature=1` was found on
    the next try only.
    """
    from pydantic import ValidationError

    from mushroom.util.options import error_message, field_errors

    try:
        cls.model_validate(known)
    except ValidationError as exc:
        found = [
            (f"field {'.'.join(map(str, err['loc']))!r}: " if err.get("loc") else "") + error_message(err)
            for err in field_errors(exc.errors())
        ]
        return "; also: " + "; ".join(found)
    return ""


def _read_as_meant(value: dict[str, Any]) -> str:
    """The other settings' mistakes, read as the kind a misspelt one is close to.

    pydantic stops at an unknown kind, so `kind=opnai` hid a misspelt setting and a bad
    number beside it, each found only on the next try.
    """
    from mushroom.backends.registry import backend_names
    from mushroom.util.words import close_match

    meant = close_match(value["kind"], backend_names(), prefix=True)
    target = config_class_or_none(meant) if meant else None
    if target is None:
        return ""
    told = _others_wrong(target, value | {"kind": meant})
    return f"; read as {meant!r},{told[1:]}" if told else ""


def _validate(value: Any) -> Any:
    if isinstance(value, str):
        # `backend = "openai"` in a config, `-o backend=openai` on the command line: the kind
        # alone, with every other setting at its default
        value = {"kind": value}
    return parse_backend_config(value) if isinstance(value, dict | BackendSettings) else value


class _BuiltinUnionSchema:
    """JSON schema of the field: the built-in kinds as a union tagged by `kind`."""

    def __get_pydantic_json_schema__(self, _core_schema: Any, handler: Any) -> dict[str, Any]:
        from pydantic import TypeAdapter

        return handler(TypeAdapter(BuiltinBackendConfig).core_schema)


BackendConfig = Annotated[SerializeAsAny[BackendSettings], BeforeValidator(_validate), _BuiltinUnionSchema()]
"""Field annotation for a backend config: validates a dict into its kind's model."""
