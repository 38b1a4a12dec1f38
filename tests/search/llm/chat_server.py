"""A local OpenAI-compatible chat-completions endpoint with scripted answers, so the real
`openai` client is tested without a network: stdlib `http.server` on 127.0.0.1, port 0, in a
thread. It records every request body it receives."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclasses.dataclass(frozen=True)
class Reply:
    """One scripted answer: a chat completion with `content`, or an error with `status`."""

    content: str | None = None
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    finish_reason: str = "stop"
    raw: bytes | None = None  # sent as the body instead (a server that misbehaves)


Script = Sequence["Reply | str"] | Callable[[dict[str, Any]], "Reply | str"]


def completion(content: str, model: str, finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


class ChatServer:
    """`with ChatServer(["{...}", Reply(status=500)]) as server:` serves POST
    /v1/chat/completions at `server.url`; answers come from the list in order (a list that
    runs out answers 400 "script exhausted") or from a function of the request body."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def prompts(self) -> list[str]:
        """The user message of every request received."""
        return [m["content"] for r in self.requests for m in r["messages"] if m["role"] == "user"]

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            if callable(self.script):
                reply = self.script(body)
            elif len(self.requests) <= len(self.script):
                reply = self.script[len(self.requests) - 1]
            else:
                reply = Reply(status=400, content="script exhausted")
        return Reply(content=reply) if isinstance(reply, str) else reply

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                reply = server._next(body)
                if reply.status == 200:
                    payload = completion(
                        reply.content or "", body.get("model", "?"), reply.finish_reason
                    )
                else:
                    error = {"message": reply.content or "scripted error", "type": "test"}
                    payload = {"error": error}
                self._send(reply.status, payload, reply.headers, reply.raw)

            def _send(
                self,
                status: int,
                payload: dict[str, Any],
                headers: Sequence = (),
                raw: bytes | None = None,
            ) -> None:
                data = json.dumps(payload).encode() if raw is None else raw
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep the test output clean

        return Handler
