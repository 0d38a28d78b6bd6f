"""A scripted OpenAI-compatible chat server on 127.0.0.1 for tests.

The script maps a marker found in the last user message to a list of behaviours, one per
call: ("ok", text), ("status", code), ("sleep", seconds). The last behaviour repeats.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeServer:
    def __init__(self, script: dict[str, list[tuple]], default_text: str = '{"incorrect_spans": []}'):
        self.script = script
        self.default_text = default_text
        self.calls: list[dict] = []
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.calls.append({"body": body, "auth": self.headers.get("Authorization")})
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
                if action[0] == "status":
                    self.send_response(action[1])
                    self.send_header("Retry-After", "0")
                    self.end_headers()
                    self.wfile.write(b'{"error": "scripted"}')
                    return
                choices = [
                    {
                        "index": i,
                        "message": {"role": "assistant", "content": action[1]},
                        "finish_reason": "stop",
                    }
                    for i in range(body.get("n", 1))
                ]
                data = json.dumps(
                    {"choices": choices, "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data.encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
