"""A scripted OpenAI-compatible server on 127.0.0.1 for tests.

Chat: the script maps a marker found in the last user message to a list of behaviours, one
per call: ("ok", text), ("cut", text) (a reply cut off at max_tokens: finish_reason
"length", usage its whole max_tokens), ("stopped", text) (finish_reason "length" after 5
tokens: a server whose context the prompt filled), ("status", code) or ("status", code, body), ("sleep", seconds), ("raw", bytes) (a 200 body sent
as these bytes).
The last behaviour repeats. A text (`default_text` too) may be a function of the prompt. `send_usage=False` leaves `usage` out of chat replies;
`retry_after=None` sends scripted errors without a Retry-After header, as a real 500 comes.

Options that imitate real servers:
- `reject_json_schema`: answers `response_format: {"type": "json_schema"}` with HTTP 500 and
  a validation message, as llama-cpp-python's server does (json_object is accepted);
  `reject_json_object`: a 400 for `{"type": "json_object"}`.
- `slots`: `GET /props` reports `total_slots` (llama.cpp); None: 404.
- `owned_by`: what `GET /v1/models` says (vLLM says "vllm").
- `ignore_n`: one choice whatever `n` asks, as llama-cpp-python's server answers;
  `refuse_n`: HTTP 500 for n > 1, as llama.cpp's llama-server answers.
- `models`: the ids `GET /v1/models` lists (default: one, "m").
- `health_delay`: seconds `GET /health` takes to answer (404): a server whose front hangs too.
- `reply_model`: the `model` a chat reply names (default: the one asked for, as vLLM answers).
- `/v1/completions` with `echo` returns prompt log-probabilities over a word/punctuation
  tokenization (`token_logprob` gives a token's value, default -1.0); with
  `prompt_logprobs=False` it answers HTTP 500 as llama-cpp-python without `--logits_all`;
  `late_echo` answers as llama-cpp-python does for a model without BOS (row j holds the
  distribution of token j+1; tokens in `late_missing` are left out of those rows).
"""

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _QuietOnHangUp(ThreadingHTTPServer):
    """A server whose client hung up mid-request (a Ctrl-C, a cut in flight) says nothing.

    socketserver prints the traceback of such a request to stderr, where a test's captured
    output of the CLI read it as mushroom's own.
    """

    def handle_error(self, request, client_address):
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError | ValueError):  # reset, broken pipe, closed file
            return
        super().handle_error(request, client_address)


LLAMA_SCHEMA_ERROR = (
    '{"error": {"message": "1 validation error for CreateChatCompletionRequest\\nresponse_format.type\\n'
    '  Input should be \'text\' or \'json_object\'", "type": "internal_server_error"}}'
)
LLAMA_LOGITS_ERROR = '{"error": {"message": "logits_all must be True to return prompt logprobs"}}'


def tokenize(text: str) -> list[str]:
    return re.findall(r"\w+|\s+|[^\w\s]", text)


class FakeServer:
    def __init__(
        self,
        script: dict[str, list[tuple]],
        default_text: str = '{"incorrect_spans": []}',
        *,
        reject_json_schema: bool = False,
        reject_json_object: bool = False,
        slots: int | None = None,
        owned_by: str = "fake",
        prompt_logprobs: bool = True,
        token_logprob: dict[str, float] | None = None,
        late_echo: bool = False,
        late_missing: frozenset[str] = frozenset(),
        ignore_n: bool = False,
        refuse_n: bool = False,
        models: tuple[str, ...] = ("m",),
        send_usage: bool = True,
        retry_after: str | None = "0",
        health_delay: float = 0.0,
        reply_model: str | None = None,
    ):
        self.reply_model = reply_model
        self.health_delay = health_delay
        self.script = script
        self.send_usage = send_usage
        self.retry_after = retry_after  # sent with scripted error statuses; None: no header (real 500s)
        self.default_text = default_text
        self.reject_json_schema = reject_json_schema
        self.reject_json_object = reject_json_object
        self.slots = slots
        self.owned_by = owned_by
        self.prompt_logprobs = prompt_logprobs
        self.token_logprob = token_logprob or {}
        self.late_echo = late_echo
        self.late_missing = late_missing
        self.ignore_n = ignore_n
        self.refuse_n = refuse_n
        self.models = models
        self.calls: list[dict] = []
        self.gets: list[str] = []
        self.counts: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, code: int, payload: str | bytes, extra_headers=()) -> None:
                data = payload if isinstance(payload, bytes) else payload.encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in extra_headers:
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def do_GET(self):
                with server.lock:
                    server.gets.append(self.path)
                if self.path == "/health" and server.health_delay:
                    time.sleep(server.health_delay)
                if self.path == "/props" and server.slots is not None:
                    return self._send(200, json.dumps({"total_slots": server.slots}))
                if self.path == "/v1/models":
                    return self._send(
                        200,
                        json.dumps(
                            {
                                "object": "list",
                                "data": [{"id": m, "owned_by": server.owned_by} for m in server.models],
                            }
                        ),
                    )
                self._send(404, '{"detail": "Not Found"}')

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.calls.append(
                        {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                    )
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if self.path == "/v1/completions":
                        return self._completion(body)
                    if self.path != "/v1/chat/completions":
                        return self._send(404, '{"detail": "Not Found"}')
                    self._chat(body)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _chat(self, body):
                form = (body.get("response_format") or {}).get("type")
                if server.reject_json_schema and form == "json_schema":
                    return self._send(500, LLAMA_SCHEMA_ERROR)
                if server.reject_json_object and form == "json_object":
                    return self._send(400, '{"error": "response_format json_object is not supported"}')
                if server.refuse_n and body.get("n", 1) > 1:
                    error = {"error": {"code": 500, "message": "Only one completion choice is allowed"}}
                    return self._send(500, json.dumps(error))
                prompt = body["messages"][-1]["content"]
                marker = next((m for m in server.script if m in prompt), None)
                action = ("ok", server.default_text)
                if marker is not None:
                    with server.lock:
                        k = server.counts.get(marker, 0)
                        server.counts[marker] = k + 1
                    steps = server.script[marker]
                    action = steps[min(k, len(steps) - 1)]
                if action[0] == "sleep":
                    time.sleep(action[1])
                    action = ("ok", server.default_text)
                if callable(action[-1]):  # a reply made from the prompt (a model that reads it)
                    action = (*action[:-1], action[-1](prompt))
                if action[0] == "raw":
                    return self._send(200, action[1])
                if action[0] == "status":
                    payload = action[2] if len(action) > 2 else '{"error": "scripted"}'
                    headers = [] if server.retry_after is None else [("Retry-After", server.retry_after)]
                    return self._send(action[1], payload, headers)
                choices = [
                    {
                        "index": i,
                        "message": {"role": "assistant", "content": action[1]},
                        "finish_reason": "length" if action[0] in ("cut", "stopped") else "stop",
                    }
                    for i in range(1 if server.ignore_n else body.get("n", 1))
                ]
                reply = {"model": server.reply_model or body.get("model"), "choices": choices}
                if server.send_usage:
                    # cut: the whole budget; stopped: 5 tokens, as a server whose context was full
                    used = body.get("max_tokens", 16) * len(choices) if action[0] == "cut" else 5
                    reply["usage"] = {"prompt_tokens": 10, "completion_tokens": used}
                self._send(200, json.dumps(reply))

            def _completion(self, body):
                if body.get("echo") and not server.prompt_logprobs:
                    return self._send(500, LLAMA_LOGITS_ERROR)
                tokens = tokenize(body["prompt"]) + [" next"]
                offsets, pos = [], 0
                for t in tokens:
                    offsets.append(pos)
                    pos += len(t)
                values = [None] + [server.token_logprob.get(t, -1.0) for t in tokens[1:]]
                tops = [None] + [{t: v} for t, v in zip(tokens[1:], values[1:])]
                if server.late_echo:  # llama-cpp-python, model without BOS: row j predicts token j+1
                    late_tops = []
                    for j, t in enumerate(tokens):
                        row = {t: -9.0}
                        if j + 1 < len(tokens) and tokens[j + 1] not in server.late_missing:
                            row[tokens[j + 1]] = values[j + 1]
                        late_tops.append(row)
                    tops = [None] + late_tops[1:]
                    values = [None] + [-9.0] * (len(tokens) - 1)
                choice = {
                    "index": 0,
                    "text": body["prompt"] + " next",
                    "logprobs": {
                        "tokens": tokens,
                        "token_logprobs": values,
                        "top_logprobs": tops,
                        "text_offset": offsets,
                    },
                }
                self._send(
                    200, json.dumps({"choices": [choice], "usage": {"prompt_tokens": len(tokens) - 1}})
                )

        self.httpd = _QuietOnHangUp(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class HungServer:
    """A server that takes every connection and never answers: a wedged HTTP front.

    `accepted` counts connections; `cut` those the client closed (a read that ends at once).
    """

    def __init__(self):
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.accepted = 0
        self.cut = 0
        self.conns = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                self.conns.append(conn)
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn):
        try:
            while conn.recv(65536):  # read the request, answer nothing, until the client hangs up
                pass
        except OSError:
            pass
        with self.lock:
            self.cut += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.sock.close()
        for conn in self.conns:
            conn.close()
