"""A local llama.cpp server on a GGUF file: the real OpenAI-compatible endpoint of the benchmarks.

llama-cpp-python's server (`pip install -e '.[server]'`) is what the real-model tests, the
LLM-quality benchmark and the server throughput benchmark talk to, so the `openai` backend
they measure is the one a user points at vLLM or Ollama. It is started on 127.0.0.1 on a free
port, with one thread by default: llama.cpp's threads wait on each other at every layer, and
on a machine where another process holds a core two threads ran 0.7 tokens/s where one ran 40.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mushroom.errors import MushroomError


class ServerError(MushroomError):
    """The llama.cpp server exited or did not answer; the message ends with its log's tail."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """llama-cpp-python's OpenAI-compatible server on one model, as a context manager.

    Args:
        model: the GGUF file.
        alias: the model name requests give (`--model_alias`).
        logits_all: keep the prompt's log-probabilities (needed to score a text with
            `echo`; the server's own default is true, so it is always said).
        n_ctx: the context window in tokens.
        threads: llama.cpp threads.
        log: where the server's output goes (default: a temporary file, deleted on stop).
    """

    def __init__(
        self,
        model: Path,
        *,
        alias: str = "smollm2",
        logits_all: bool = True,
        n_ctx: int = 2048,
        threads: int = 1,
        log: Path | None = None,
    ):
        self.model = model
        self.alias = alias
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.args = [sys.executable, "-m", "llama_cpp.server", "--model", str(model)]
        self.args += ["--model_alias", alias, "--host", "127.0.0.1", "--port", str(self.port)]
        self.args += ["--n_threads", str(threads), "--n_ctx", str(n_ctx)]
        self.args += ["--logits_all", "true" if logits_all else "false"]
        self.proc: subprocess.Popen | None = None
        self._temporary = log is None
        self.log_path = (
            Path(tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False).name)
            if log is None
            else log
        )

    def start(self, timeout_s: float = 180.0) -> LlamaServer:
        """Starts the server and waits until it lists its model.

        Raises:
            ServerError: it exited, or did not answer within `timeout_s`.
        """
        import httpx

        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise ServerError(f"llama server exited with {self.proc.returncode}: {self.tail()}")
                try:
                    if httpx.get(f"{self.url}/models", timeout=2.0).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            raise ServerError(f"llama server not up after {timeout_s:.0f} s: {self.tail()}")
        except BaseException:
            # a failed start or a Ctrl-C while the model loads: no server is left behind, since
            # a `with` block whose __enter__ raised never reaches __exit__
            self.stop(keep_log=True)
            raise

    def tail(self, n: int = 2000) -> str:
        """The last `n` characters of the server's log."""
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, keep_log: bool = False) -> None:
        """Stops the server (terminate, then kill after 15 s); a temporary log goes with it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._temporary and not keep_log:
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
