"""Any OpenAI-compatible server: vllm serve, llama.cpp, Ollama, TGI, or a cluster.

A served cluster behind a load balancer is how mushroom scales past one machine, but the
defaults are chosen for the other end, a one-slot CPU server (llama.cpp on a laptop):

- **Concurrency** `auto`: the server's own slot count when it reports one (llama.cpp's
  `/props` `total_slots`, or the length of `/slots`), 32 for vLLM (it batches continuously,
  with no slot limit), and 1 for any other server. Requests beyond a server's slots only wait
  in its queue while their read timeout runs, which is how 8 requests against one slot ended
  as timeouts.
- **Timeouts**: a generous read timeout (600 s; a long answer from a CPU model takes
  minutes) and a short connect timeout. After a *read* timeout the request is not resent
  (unless `retry_timeouts`): the client closes its connection, but a server that does not
  notice (llama-cpp-python finishes a non-streamed request anyway) is still working on it,
  and a resend would queue behind the abandoned copy. Connection failures are resent, since
  those requests never reached the server.
- **Retries** (tenacity): 429, 5xx, and lost connections, with bounded exponential backoff
  that honours Retry-After. A 4xx, and a 5xx whose body says the request is invalid (as
  llama-cpp-python answers a `response_format` it does not know), is the request's error at
  once: sending it again cannot help. While no server has answered at the URL in the run, a
  request that gives up on connection errors makes the next ones fail at once, unsent, for
  30 s: a dead URL fails a run in seconds, not hours of per-item retries. After a server has
  answered, it takes three such requests in a row (a server gone for good, not a restart).
- **Structured output**: the JSON schema travels in the form the server knows
  (`structured_output`): `json_schema` (OpenAI, vLLM), `json_object` with a `schema`
  (llama.cpp), `guided_json` (vLLM's extra field) or `none`. `auto` tries them in the order
  json_schema, json_object, none, moving on when the server rejects a form, and keeps the
  first accepted one for the rest of the run; each Generation records the form it was made
  with.
- **Log-likelihood** over `/completions` with `echo` and `logprobs` (vLLM; llama-cpp-python
  started with `--logits_all true`): the chat prompt is rendered as text (by the server's
  `/apply-template` when it has one, else a plain `role: content` rendering, or ChatML when
  configured), the continuation appended, and the log-probabilities of the tokens that fall
  inside the continuation summed. A server that returns no prompt log-probabilities gives
  each request an error saying so. llama-cpp-python (0.3.x) echoes them one token late for a
  model without a BOS token (SmolLM2, Qwen); that is detected from the response itself and
  token j is then read from row j-1's top-50, exact when it is there and an error when not.

The API key is read from the environment variable the config names and is never logged or
written into a run folder.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, stop_before_delay
from tenacity.wait import wait_random_exponential

from mushroom.backends.base import (
    RECOVERED,
    Backend,
    Generation,
    GenerationRequest,
    Loglikelihood,
    LoglikelihoodRequest,
    Message,
    OnResult,
    OnScore,
    by_text,
)
from mushroom.backends.breaker import SILENT_CLOSE, TIMED_OUT, CircuitBreaker
from mushroom.backends.config import OpenAIConfig
from mushroom.backends.http_answers import (
    ONE_CHOICE,
    http_error,
    is_busy,
    is_final,
    is_format_rejection,
    too_long_error,
)
from mushroom.backends.openai_schema import read_body, read_completion
from mushroom.backends.registry import register_backend
from mushroom.backends.served import (
    auth_headers,
    check_served_model,
    exception_detail,
    hung_message,
    is_served,
    same_model,
    served_models,
)
from mushroom.backends.sockets import install as install_sockets
from mushroom.backends.trips import remember_trip
from mushroom.errors import NOT_SENT, SLOWER, TOO_LONG
from mushroom.util.words import one_line, plural

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
FALLBACK = ("json_schema", "json_object", "none")
VLLM_CONCURRENCY = 32
UNREACHABLE_PAUSE_S = 30.0  # after a request found no server, others fail at once for this long
UNREACHABLE_IN_ROW = 3  # once a server has answered: requests that found none, in a row, to stop sending
RETRY_WAIT_CAP_S = 30.0  # the longest wait between two attempts
# a connection closed with no answer after this long was timed out (a proxy's read timeout,
# nginx's is 60 s), not dropped by chance: sent again, it waits as long and is closed again
LONG_SILENCE_S = 30.0
RETRY_AFTER_CAP_S = 60.0  # the longest Retry-After honoured
LATE_TOP_K = 50  # top log-probabilities asked for when a server's echoed rows are one token late
T = TypeVar("T")


class _Transient(Exception):
    """An attempt that may succeed if made again; carries the response for Retry-After."""

    def __init__(
        self, message: str, why: str, response: httpx.Response | None = None, unreachable: bool = False
    ):
        super().__init__(message)
        self.why = why  # short enough to count retries by (`retry_tally`): "HTTP 503", "timed out"
        self.response = response
        self.unreachable = unreachable  # no connection could be made: the server is not there


class _Final(Exception):
    """An attempt whose failure sending again cannot fix."""


def render_plain(messages: list[Message]) -> str:
    """`role: content` paragraphs and an open assistant turn, as the transformers backend does."""
    return "\n\n".join(f"{m.role}: {m.content}" for m in messages) + "\n\nassistant:\n"


def render_chatml(messages: list[Message]) -> str:
    """ChatML (Qwen, SmolLM2, ...), ending with the open assistant turn."""
    turns = "".join(f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


def _numeric_tops(rows: Any) -> list[dict[str, float] | None]:
    """Echoed top log-probability rows with only their numeric entries (a row not an object: None).

    A server's row may hold null values; compared by `max` they raised TypeError.
    """
    if not isinstance(rows, list):
        return []
    return [
        {k: v for k, v in row.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        if isinstance(row, dict)
        else None
        for row in rows
    ]


@register_backend("openai", config=OpenAIConfig)
class OpenAIBackend(Backend):
    """Client for `POST {base_url}/chat/completions` (and `/completions` for scoring)."""

    config: OpenAIConfig

    @classmethod
    def check_config(cls, config: OpenAIConfig) -> None:
        """A server that lists its models must serve this one."""
        check_served_model(config)

    def __init__(self, config: OpenAIConfig):
        super().__init__(config)
        config.check_settings()  # a URL and a served model's name
        headers = {"Content-Type": "application/json", **auth_headers(config)}
        self.base_url = str(config.base_url).rstrip("/")
        self.server_root = re.sub(r"/v1$", "", self.base_url)
        self.client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s, pool=None),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )
        # the sockets of requests in flight (proxies' too), cut on Ctrl-C and when the breaker trips
        self._sockets = install_sockets(self.client)
        self._stop = threading.Event()  # set when a Ctrl-C (or a failed item) ends a batch: drop results
        self._wake = threading.Event()  # set then, and when the breaker trips: end waits between attempts
        self._record = threading.Lock()  # held to record a result, and to set `_stop`
        self._cut_pool: ThreadPoolExecutor | None = None  # the pool of a batch so ended
        self.retries_made = 0
        self._retried: Counter[str] = Counter()  # retries by why, and requests they saved (`retry_tally`)
        # (message, when) of a request that gave up on connection errors while no server has
        # answered at the URL in this run, or the UNREACHABLE_IN_ROW-th such request in a row
        # after one has: for UNREACHABLE_PAUSE_S after it requests fail at once instead of each
        # spending its retries on a server that is not there (a dead URL cost every item of a
        # test run ~9 s, hours in all); then they are sent again, in case it is back. A short
        # outage (a restart) fails only the requests made during it.
        self._unreachable: tuple[str, float] | None = None
        self.breaker = CircuitBreaker(
            self.base_url,
            config.circuit_breaker,
            on_open=self._cut_in_flight,
            timeout_s=config.timeout_s,
            model=config.model,
        )
        self._reached = False
        self._unreachable_in_row = 0
        self._lock = threading.Lock()
        self._concurrency: int | None = config.concurrency if isinstance(config.concurrency, int) else None
        self.concurrency_source = "config" if self._concurrency else ""
        # structured output: the form tried next in `auto`, and whether the server accepted it
        self._form = "json_schema" if config.structured_output == "auto" else config.structured_output
        self.form_confirmed = config.structured_output != "auto"
        self._template: str | None = None  # auto: "server" or "plain", found on first use
        self.loglikelihood_template_used = ""
        self._echo_late: bool | None = None  # llama-cpp-python's echo bug, found on first use
        self._model_checked = False
        self._warned: set[str] = set()
        self._one_choice = False  # the server refused n > 1: samples are asked for one at a time

    # ----------------------------------------------------------------- server facts

    @property
    def structured_form(self) -> str:
        """The structured-output form requests are sent with now."""
        return self._form

    @property
    def concurrency(self) -> int:
        """Requests in flight: the configured number, or what `auto` reads from the server once."""
        with self._lock:
            if self._concurrency is None:
                self._concurrency, self.concurrency_source = self._detect_concurrency()
            return self._concurrency

    def _quick(self, method: str, url: str, **kwargs: Any) -> httpx.Response | None:
        """A setup request (models, slots, a chat template), given the connect timeout to answer.

        None when it failed, or the breaker has tripped; a server that takes the connection
        and answers nothing is hung, and the breaker trips (each further request would wait).
        """
        if self.breaker.blocked() is not None:
            return None
        try:
            return self.client.request(method, url, timeout=self.config.connect_timeout_s, **kwargs)
        except httpx.ReadTimeout:
            asked = f"{method} {url.removeprefix(self.server_root)}"
            self.breaker.trip(hung_message(self.base_url, asked, self.config.connect_timeout_s))
        except httpx.HTTPError:
            pass
        return None

    def _get_json(self, url: str) -> Any:
        """A GET's JSON answer, or None."""
        response = self._quick("GET", url)
        if response is None or response.status_code != 200:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def _check_served_model(self) -> None:
        """Warns once when the server lists its models and the configured one is not among them.

        The CLI and `api` stop before a run when a one-model server lacks it
        (`check_served_model`); a server listing several may still route the name (Ollama
        tags, routers), and a backend built directly from Python is only warned.
        """
        with self._lock:
            if self._model_checked:
                return
            self._model_checked = True
        ids = served_models(self._get_json(f"{self.base_url}/models"))
        model = self.config.model
        if ids and not is_served(model, ids):
            self.warn(
                f"the server at {self.base_url} lists {', '.join(map(repr, ids[:5]))}, not {model!r}; "
                f"if it answers anyway, the run records {model!r} for whatever model it used"
            )

    def _detect_concurrency(self) -> tuple[int, str]:
        props = self._get_json(f"{self.server_root}/props")
        if isinstance(props, dict) and isinstance(props.get("total_slots"), int) and props["total_slots"] > 0:
            return props["total_slots"], "server /props total_slots"
        slots = self._get_json(f"{self.server_root}/slots")
        if isinstance(slots, list) and slots:
            return len(slots), "server /slots"
        models = self._get_json(f"{self.base_url}/models")
        data = models.get("data") if isinstance(models, dict) else None
        if isinstance(data, list) and any(isinstance(m, dict) and m.get("owned_by") == "vllm" for m in data):
            return VLLM_CONCURRENCY, "vLLM server"
        return 1, "default for a server that reports no slots"

    # ----------------------------------------------------------------- one HTTP call

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        response = getattr(exc, "response", None)
        if response is not None:
            retry_after = response.headers.get("retry-after")
            if retry_after:
                try:
                    return min(max(float(retry_after), 0.0), RETRY_AFTER_CAP_S)
                except ValueError:
                    pass
        return wait_random_exponential(multiplier=0.5, max=RETRY_WAIT_CAP_S)(state)

    def _cut_in_flight(self) -> None:
        """Ends the requests in flight and their waits: their items end now, not at their timeout."""
        self._wake.set()
        if self._sockets is not None:
            self._sockets.abort()

    def _answers(self) -> bool:
        """Whether the server's HTTP front answers at all (any status) within the connect timeout.

        Asked after a read timeout: a server that answers this is alive and the model slow
        (llama-cpp-python answers an unknown path while its model is busy); one that does not
        is hung, and every further request would wait out its own timeout.
        """
        try:
            self.client.get(f"{self.server_root}/health", timeout=self.config.connect_timeout_s)
        except httpx.HTTPError:
            return False
        return True

    def _count_retry(self, state: RetryCallState) -> None:
        failed = state.outcome.exception() if state.outcome is not None else None
        why = failed.why if isinstance(failed, _Transient) else "other"  # only a _Transient is retried
        with self._lock:
            self.retries_made += 1
            self._retried[why] += 1

    def retry_tally(self) -> Counter[str]:
        with self._lock:
            return Counter(self._retried)

    def _attempt(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """One POST: a response to judge, or _Transient / _Final."""
        if self._stop.is_set():
            raise _Final(f"{NOT_SENT}: the run was interrupted")
        blocked = self.breaker.blocked()
        if blocked is not None:  # tripped while this request waited to be sent again
            raise _Final(blocked)
        sent = time.monotonic()
        try:
            response = self.client.post(path, json=body)
        except httpx.HTTPError as exc:
            if self._stop.is_set():  # cut by a Ctrl-C (the result is dropped)
                raise _Final("cut in flight: the run was interrupted") from exc
            blocked = self.breaker.blocked()
            if blocked is not None:  # cut when the breaker tripped: it was sent
                raise _Final(f"cut in flight: {blocked.removeprefix(NOT_SENT + ': ')}") from exc
            raise self._network_failure(exc, f"{self.base_url}{path}", time.monotonic() - sent) from exc
        self._reached = True
        if response.status_code in RETRY_STATUS and not is_final(response.status_code, response.text):
            raise _Transient(
                f"HTTP {response.status_code}: {response.text[:200]}",
                f"HTTP {response.status_code}",
                response,
            )
        return response

    def _network_failure(self, exc: httpx.HTTPError, url: str, waited: float = 0.0) -> _Transient | _Final:
        """What a request that got no HTTP answer ends in: sent again, or not.

        Network errors name the URL: "connection refused" alone does not tell a user which of
        their servers (or which port of a restarted one) the run was talking to. A connection
        closed after a long silence is a timeout on the way (a proxy's): it is judged as a read
        timeout is, not sent again to wait as long (a 120 s hold cost 3 x 120 s unexplained).
        """
        kind = f"{type(exc).__name__}{exception_detail(exc)} ({url})"
        if isinstance(exc, httpx.ReadTimeout):
            message = f"{TIMED_OUT} {self.config.timeout_s} s waiting for {url}"
            hung = self._hung(message, f"answered no request within {self.config.timeout_s} s")
            if hung is not None:
                return hung
            if self.config.retry_timeouts:
                return _Transient(message, "timed out")
            return _Final(f"{message} (a slower model needs a {SLOWER}); not resent")
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return _Transient(f"connection error: {kind}", "connection error", unreachable=True)
        if isinstance(exc, httpx.RemoteProtocolError) and waited >= LONG_SILENCE_S:
            message = (
                f"{SILENT_CLOSE} {waited:.0f} s with no answer ({kind}): a proxy's "
                "read timeout in front of the server, or the server dropped it"
            )
            hung = self._hung(message, f"closed a request after {waited:.0f} s with no answer")
            if hung is not None:
                return hung
            return _Final(f"{message}; not resent (it would wait as long): raise the proxy's timeout")
        if isinstance(exc, httpx.RemoteProtocolError):
            return _Transient(f"connection error: {kind}", "connection error")
        return _Final(f"transport error: {kind}")

    def _hung(self, message: str, what: str) -> _Final | None:
        """After a request that got no answer in time: the breaker trips if the front is silent too."""
        self._reached = True  # connected: a server is there
        if self._answers():
            return None
        self.breaker.trip(
            f"the server at {self.base_url} {what} "
            f"and no status check (GET /health) within {self.config.connect_timeout_s} s: "
            "it is hung, or busy with another client's requests"
        )
        return _Final(f"{message}, and it answers nothing else either: the server is hung")

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response | str:
        """The final response (any status) after retries, or an error message."""
        # on probation (the server failed every request earlier in this command), one attempt:
        # a server still failing costs a round trip, not another ~20 s of retries
        attempts = 1 if self.breaker.on_probation() else self.config.max_retries + 1
        blocked = self.breaker.blocked()
        if blocked is not None:
            return blocked
        unreachable = self._unreachable
        if unreachable is not None and time.monotonic() - unreachable[1] < UNREACHABLE_PAUSE_S:
            return f"{NOT_SENT}: an earlier request {unreachable[0]}; the same command retries it"
        retrying = Retrying(
            # a request's retries end within retry_budget_s, however many attempts are left: no
            # attempt is made past it (stop_after_delay waited a Retry-After of 60 s at 60 s of 90)
            stop=stop_after_attempt(attempts) | stop_before_delay(self.config.retry_budget_s),
            wait=self._wait,
            sleep=self._wake.wait,  # a Ctrl-C or a tripped breaker ends the wait between attempts
            retry=retry_if_exception_type(_Transient),
            before_sleep=self._count_retry,
            reraise=True,
        )
        try:
            response = retrying(self._attempt, path, body)
        except _Transient as exc:
            made = retrying.statistics.get("attempt_number", attempts)
            # "1 attempt" with max_retries 5 puzzled: a long attempt spent the retry budget
            budget = (
                f" (retries end within retry_budget_s {self.config.retry_budget_s:g} s)"
                if made < attempts
                else ""
            )
            message = f"gave up after {plural(made, 'attempt')}{budget}: {exc}"
            if exc.unreachable:
                with self._lock:
                    self._unreachable_in_row += 1
                    gone = not self._reached or self._unreachable_in_row >= UNREACHABLE_IN_ROW
                    if gone:
                        self._unreachable = (message, time.monotonic())
                if gone:  # a later backend to it in this command makes one attempt, not six
                    remember_trip(self.base_url, self.config.model, message)
            return message
        except _Final as exc:
            sent = retrying.statistics.get("attempt_number", 1) - 1
            if str(exc).startswith(NOT_SENT) and sent:  # stopped before a retry: it was sent
                return f"stopped after {plural(sent, 'attempt')}: {str(exc).removeprefix(NOT_SENT + ': ')}"
            return str(exc)
        self._unreachable, self._unreachable_in_row = None, 0  # the server answers (again)
        if retrying.statistics.get("attempt_number", 1) > 1:
            with self._lock:
                self._retried[RECOVERED] += 1
        return response

    # ----------------------------------------------------------------- generation

    def payload(self, req: GenerationRequest, form: str | None = None) -> dict[str, Any]:
        """The request body; the JSON schema travels in `form` (default: the current one)."""
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": [m.model_dump() for m in req.messages],
            "temperature": req.temperature,
            "top_p": req.top_p,
            "max_tokens": req.max_tokens,
            "n": req.n,
        }
        if req.seed is not None:
            body["seed"] = req.seed
        form = form or self._form
        if req.json_schema is not None:
            if form == "json_schema":
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "output", "schema": req.json_schema},
                }
            elif form == "json_object":
                body["response_format"] = {"type": "json_object", "schema": req.json_schema}
            elif form == "guided_json":
                body["guided_json"] = req.json_schema
        if req.top_logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = req.top_logprobs
        body.update(self.config.extra)
        return body

    @staticmethod
    def parse(data: Any) -> Generation:
        """Texts, top log-probabilities and usage from a chat completion response.

        A body of the wrong shape is an error on this request (`read_completion`), not a crash.
        """
        completion = read_completion(data)
        if isinstance(completion, str):
            return Generation(error=completion)
        if not completion.choices:
            return Generation(error="the server's response has no choices (an empty list): no reply to read")
        texts, logprobs, reasons = [], [], []
        for choice in sorted(completion.choices, key=lambda c: c.index):
            texts.append((choice.message.content if choice.message else None) or "")
            reasons.append(choice.finish_reason)
            content = choice.logprobs.content if choice.logprobs else None
            # one list per choice, empty where a choice came without: kept in step with the texts
            logprobs.append(
                [by_text((t.token, t.logprob) for t in (tok.top_logprobs or [tok])) for tok in content or []]
            )
        return Generation(
            texts=texts,
            logprobs=logprobs if any(logprobs) else None,
            usage=completion.usage,
            finish_reasons=reasons if any(reasons) else [],
        )

    def _fall_back(self, rejected: str, why: str) -> str:
        """Moves `auto` past a rejected form (once, whichever thread saw it first); the form to use.

        The move to `none` is said as it happens: the replies are then unconstrained, and more
        of them fail to parse, which a reader of the counters should be able to trace to the
        server. The move to `json_object` is llama.cpp's usual path and still constrained, so
        it is only recorded (`structured_output` in raw/).
        """
        with self._lock:
            moved = self._form == rejected and not self.form_confirmed
            if moved:
                self._form = FALLBACK[FALLBACK.index(rejected) + 1]
            form = self._form
        if moved and form == "none":
            self.warn(
                f"the server at {self.base_url} rejected every JSON-schema form ({why}); its replies "
                "are unconstrained, so more of them may fail to parse (see the llm.* counters)"
            )
        return form

    def _one(self, req: GenerationRequest) -> Generation:
        """One request's samples; asked for again (n = the rest) when the server sent fewer than n.

        llama-cpp-python's server ignores `n` and answers with one choice, so `samples=3`
        voted over one sample while the record said three; llama.cpp's llama-server refuses
        n > 1 outright. The rest are asked for with the next seeds (the same seed would
        repeat the first sample), one at a time once the server has refused n, and the
        shortfall is warned about once.
        """
        if req.n > 1 and self._one_choice:
            gen = self._request(req.model_copy(update={"n": 1}))
        else:
            gen = self._request(req)
            if req.n > 1 and gen.error and ONE_CHOICE.search(gen.error):
                with self._lock:
                    self._one_choice = True
                gen = self._request(req.model_copy(update={"n": 1}))
        if gen.error or len(gen.texts) >= req.n:
            return gen
        self._warn_short_n(len(gen.texts), req.n)
        parts = [gen]
        have = len(gen.texts)
        while have < req.n:
            seed = None if req.seed is None else req.seed + len(parts)
            n = 1 if self._one_choice else req.n - have
            more = self._request(req.model_copy(update={"n": n, "seed": seed}))
            if more.error:
                return Generation(error=f"{more.error} (asking for sample {have + 1} of {req.n})")
            parts.append(more)
            have += len(more.texts)  # parse() gives at least one text or an error
        usage: dict[str, int] = {}
        for part in parts:
            for k, v in part.usage.items():
                usage[k] = usage.get(k, 0) + v
        logprobs = [lp for part in parts for lp in part.logprobs or []]
        reasons = [r for part in parts for r in part.finish_reasons or [None] * len(part.texts)]
        return Generation(
            texts=[t for part in parts for t in part.texts][: req.n],
            logprobs=logprobs[: req.n] if all(part.logprobs for part in parts) else None,
            usage=usage,
            finish_reasons=reasons[: req.n] if any(reasons) else [],
            structured_output=gen.structured_output,
        )

    def _warn_once(self, kind: str, message: str) -> None:
        """Warns of `kind` once per backend: each reply of a batch would say it again."""
        with self._lock:
            if kind in self._warned:
                return
            self._warned.add(kind)
        self.warn(message)

    def _read_body(self, content: bytes) -> Any:
        """A 200 body's JSON (`read_body`), its mended bytes said once; ValueError if it is none."""
        data, mended = read_body(content)
        if mended:
            self._warn_once("mended", f"the server at {self.base_url} answered with {mended}")
        return data

    def _check_reply_model(self, data: Any) -> None:
        """Warns when a reply names another model than the one asked for.

        A router or a multi-model server may answer with a fallback model; the run's records
        and report would name the model asked for. The model check before the run catches a
        one-model server only.
        """
        replied = data.get("model") if isinstance(data, dict) else None
        if isinstance(replied, str) and replied.strip() and not same_model(self.config.model, replied):
            self._warn_once(
                "model",
                f"the server at {self.base_url} answered as model {one_line(replied, 80)!r}, not "
                f"{self.config.model!r}, which the run's records name: check which model answers (a local "
                "server may name every reply by its own alias: llama.cpp's --model_alias or --alias "
                "makes them agree)",
            )

    def _warn_short_n(self, got: int, wanted: int) -> None:
        how = "refuses n > 1" if self._one_choice else f"answered n={wanted} with {got} sample(s)"
        self._warn_once(
            "short_n",
            f"the server at {self.base_url} {how} (llama.cpp's servers do); the other samples are asked "
            "for in further requests",
        )

    def _judged(self, error: str | None, n: int = 1) -> None:
        """Tells the circuit breaker how a request ended (a busy server's give-up is neither).

        A refusal of n > 1 is no server fault either: `_one` asks again with n = 1 (counted,
        it tripped a backend on probation before its first real request was sent). Of a
        request with n = 1 it is: a server saying so to every request must still trip it.
        """
        if error is None:
            self.breaker.success()
        elif not is_busy(error) and TOO_LONG not in error and not (n > 1 and ONE_CHOICE.search(error)):
            self.breaker.failure(error)

    def _request(self, req: GenerationRequest) -> Generation:
        gen = self._request_once(req)
        self._judged(gen.error, req.n)
        return gen

    def _request_once(self, req: GenerationRequest) -> Generation:
        auto = self.config.structured_output == "auto" and req.json_schema is not None
        form = self._form
        while True:
            result = self.post("/chat/completions", self.payload(req, form))
            if isinstance(result, str):
                return Generation(error=result)
            status, text = result.status_code, result.text
            if status == 200:
                try:
                    data = self._read_body(result.content)
                except ValueError as exc:  # a web page or a login in front of the server: say which
                    shown = " ".join(text.split())[:80]
                    if text.lstrip("\ufeff \t\r\n")[:1] in ("{", "["):  # JSON, cut or broken: no URL fault
                        return Generation(
                            error=f"{self.base_url}/chat/completions answered 200 with JSON it could not "
                            f"read ({one_line(str(exc), 120)}; it begins {shown!r})"
                        )
                    return Generation(
                        error=f"{self.base_url}/chat/completions answered 200 with a body that is not JSON "
                        f"(it begins {shown!r}): is the URL the server's API (its port, /v1)?"
                    )
                self._check_reply_model(data)
                gen = self.parse(data)
                if req.json_schema is not None:
                    with self._lock:
                        if auto and self._form == form:
                            self.form_confirmed = True
                    gen.structured_output = form
                return gen
            long = too_long_error(status, text)
            if long is not None:  # no form change fixes it
                return Generation(error=long)
            if auto and form != "none" and not self.form_confirmed and is_format_rejection(status, text):
                form = self._fall_back(form, http_error(status, text))
                continue
            if auto and form != self._form:  # another thread moved on meanwhile
                form = self._form
                continue
            hint = ""
            if status == 404 and not self.base_url.endswith("/v1"):  # most often the missing /v1
                where = f"{self.base_url}/chat/completions"
                hint = f" ({where} not found: OpenAI-compatible servers serve under /v1)"
            elif status == 400 and auto and form != "none" and not self.form_confirmed:
                # a bare "Bad Request" names no form, so `auto` cannot tell it from another fault
                hint = (
                    f" (if the server does not take response_format {form}, give "
                    "-o backend.structured_output=json_object, or none, in a new --out folder)"
                )
            return Generation(error=http_error(status, text) + hint)

    def _map(self, call: Callable[[int], T], record: Callable[[int, T], None], n: int) -> None:
        """Runs `call` over 0..n-1 with `concurrency` requests in flight, `record`ing each result.

        On Ctrl-C (or an item's exception) the requests in flight are cut and their results
        dropped: leaving the pool's block waited for each of them, up to `timeout_s`, with
        nothing said, and then recorded their items as if the run had gone on.
        """
        if n == 0:
            return
        if self._cut_pool is not None:
            # the threads of a batch cut short end at once (their reads were cut, their waits
            # woken); waited for, so that none sees the stop cleared and sends its request
            self._cut_pool.shutdown(wait=True)
            self._cut_pool = None
        self._stop.clear()
        if self.breaker.blocked() is None:  # a tripped breaker's cut holds for the backend's life
            self._wake.clear()
            if self._sockets is not None:
                self._sockets.resume()

        def work(i: int) -> None:
            result = call(i)
            with self._record:  # "not stopped, so record it" as one step
                if not self._stop.is_set():  # interrupted: not recorded, the item is redone on resume
                    record(i, result)

        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, n))
        try:
            list(pool.map(work, range(n)))
        except BaseException:
            with self._record:  # no result is recorded from now on
                self._stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            self._cut_in_flight()
            self._cut_pool = pool
            raise
        pool.shutdown()

    def generate(
        self, requests: list[GenerationRequest], on_result: OnResult | None = None
    ) -> list[Generation]:
        if requests:
            self._check_served_model()
        results: list[Generation | None] = [None] * len(requests)

        def record(i: int, gen: Generation) -> None:
            results[i] = gen
            if on_result:
                on_result(i, gen)

        self._map(lambda i: self._one(requests[i]), record, len(requests))
        return [r if r is not None else Generation(error="no result") for r in results]

    # ----------------------------------------------------------------- log-likelihood

    def _render(self, messages: list[Message]) -> str:
        choice = self.config.loglikelihood_template
        if choice == "auto":
            with self._lock:
                if self._template is None:
                    probe = self._server_template(messages)
                    self._template = "server" if probe is not None else "plain"
            choice = self._template
        self.loglikelihood_template_used = choice
        if choice == "server":
            rendered = self._server_template(messages)
            if rendered is not None:
                return rendered
            self.loglikelihood_template_used = "plain"
            return render_plain(messages)
        return render_chatml(messages) if choice == "chatml" else render_plain(messages)

    def _server_template(self, messages: list[Message]) -> str | None:
        """llama.cpp's `/apply-template`: the model's own chat template applied by the server."""
        body = {"messages": [m.model_dump() for m in messages]}
        response = self._quick("POST", f"{self.server_root}/apply-template", json=body)
        if response is None or response.status_code != 200:
            return None
        try:
            prompt = response.json().get("prompt")
        except (ValueError, AttributeError):
            return None
        return prompt if isinstance(prompt, str) else None

    @staticmethod
    def echo_rows_late(lp: dict[str, Any]) -> bool | None:
        """Whether echoed rows are one token late (row j predicts token j+1); None: cannot tell.

        llama-cpp-python pairs token j with the distribution computed *after* it when the model
        has no BOS token (SmolLM2, Qwen): its top-1 then matches the next token far more often
        than the token itself, which never happens with a correct server (vLLM).
        """
        if not isinstance(lp, dict):
            return None
        tokens, tops = lp.get("tokens"), _numeric_tops(lp.get("top_logprobs"))
        if not isinstance(tokens, list):
            return None
        own = late = 0
        for j in range(1, min(len(tokens), len(tops))):
            top = tops[j]
            if not top:
                continue
            best = max(top, key=top.get)
            own += best == tokens[j]
            late += j + 1 < len(tokens) and best == tokens[j + 1]
        if own == late:
            return None
        return late > own

    @staticmethod
    def continuation_logprob(data: dict[str, Any], start: int, end: int, late: bool = False) -> Loglikelihood:
        """Sums the echoed log-probabilities of the tokens in characters [start, end) of the prompt.

        With `late` rows, token j's value is read from row j-1's top log-probabilities: exact,
        but only for tokens among the top-k the server returned.
        """
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return Loglikelihood(error="response has no choices")
        lp = choices[0].get("logprobs") or {}
        if not isinstance(lp, dict):
            lp = {}
        tokens, values, offsets = lp.get("tokens"), lp.get("token_logprobs"), lp.get("text_offset")
        if not (isinstance(tokens, list) and isinstance(values, list) and isinstance(offsets, list)):
            return Loglikelihood(
                error="the server returned no prompt log-probabilities for echo=true "
                "(llama-cpp-python: start it with --logits_all true)"
            )
        if not all(isinstance(t, str) for t in tokens) or not len(tokens) == len(values) == len(offsets):
            return Loglikelihood(
                error="the server's echoed tokens are malformed (not text, or lists unequal)"
            )
        tops = _numeric_tops(lp.get("top_logprobs")) or [None] * len(tokens)
        inside = [k for k, off in enumerate(offsets) if isinstance(off, int) and start <= off < end]
        if not inside:
            return Loglikelihood(error="the echoed tokens do not cover the continuation")
        if offsets[inside[0]] != start:
            return Loglikelihood(error="the continuation does not start at a token boundary")
        total, greedy = 0.0, True
        for k in inside:
            row = k - 1 if late else k
            top = tops[row] if 0 <= row < len(tops) else None
            value = top.get(tokens[k]) if late and isinstance(top, dict) else (None if late else values[k])
            if late and value is None:
                width = len(top) if isinstance(top, dict) else 0
                return Loglikelihood(
                    error=f"continuation token {tokens[k]!r} is not among the {width} most likely at its "
                    "position, and this server's echoed log-probabilities are one token late "
                    "(llama-cpp-python with a model without BOS), so only its top-k values are exact"
                )
            if not isinstance(value, int | float) or not math.isfinite(value):
                return Loglikelihood(
                    error="the server returned no log-probability for a prompt token "
                    "(llama-cpp-python: start it with --logits_all true)"
                )
            total += float(value)
            if isinstance(top, dict) and top:
                greedy = greedy and max(top, key=top.get) == tokens[k]
        return Loglikelihood(logprob=total, is_greedy=greedy)

    def _score(self, req: LoglikelihoodRequest) -> Loglikelihood:
        blocked = self.breaker.blocked()
        if blocked is not None:  # before the template request too: it would wait on a hung server
            return Loglikelihood(error=blocked)
        if self._stop.is_set():
            return Loglikelihood(error=f"{NOT_SENT}: the run was interrupted")
        prompt = self._render(req.messages)
        full = prompt + req.continuation
        while True:
            late = self._echo_late
            body = {
                "model": self.config.model,
                "prompt": full,
                "max_tokens": 1,
                "temperature": 0.0,
                "echo": True,
                "logprobs": LATE_TOP_K if late else 1,
            }
            result = self.post("/completions", body)
            if isinstance(result, str):
                return Loglikelihood(error=result)
            if result.status_code != 200:
                long = too_long_error(result.status_code, result.text)  # the prompt's fault, not the server's
                return Loglikelihood(
                    error=long
                    or f"the server cannot score prompts ({http_error(result.status_code, result.text)})"
                )
            try:
                data = self._read_body(result.content)  # echoed tokens may cut a character's bytes
                lp = data["choices"][0].get("logprobs") or {}
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                return Loglikelihood(error="server answered 200 without a completion choice in JSON")
            if late is None:
                seen = self.echo_rows_late(lp)
                with self._lock:
                    if self._echo_late is None and seen is not None:
                        self._echo_late = seen
                if seen:  # ask again with enough top log-probabilities to read the late rows
                    continue
            # offsets are in characters of the prompt text as sent (vLLM, llama-cpp-python)
            return self.continuation_logprob(data, len(prompt), len(full), late=bool(late or False))

    def loglikelihood(
        self, requests: list[LoglikelihoodRequest], on_result: OnScore | None = None
    ) -> list[Loglikelihood]:
        if requests:
            self._check_served_model()
        results: list[Loglikelihood | None] = [None] * len(requests)

        def record(i: int, score: Loglikelihood) -> None:
            self._judged(score.error)
            results[i] = score
            if on_result:
                on_result(i, score)

        self._map(lambda i: self._score(requests[i]), record, len(requests))
        return [r if r is not None else Loglikelihood(error="no result") for r in results]

    def close(self) -> None:
        if self._cut_pool is not None:
            self._cut_pool.shutdown(wait=False, cancel_futures=True)
            self._cut_pool = None
        self.client.close()
