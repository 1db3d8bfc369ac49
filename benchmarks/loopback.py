"""A local fake of an OpenAI-compatible chat-completions server, for tests and benchmarks.

Not a judge: verdicts come from a rule (``default_verdict``), served on 127.0.0.1 at a free port
by a background thread of the calling process (``with LoopbackOpenAI() as server: ...``, then
``server.base_url``). It answers ``POST /v1/chat/completions`` and ``GET /v1/models`` like a real endpoint, with
injectable latency and faults, and records every request so that tests can count exactly what the
judge sent (and prove the openai client's own retries are off). Faults: ``429`` (with
Retry-After), ``500``, ``hang`` (no answer until past the client's timeout), ``malformed_body``
(HTTP 200 with a body that is not JSON), ``truncated`` (Content-Length promises more than is sent),
``bad_verdict`` (a well-formed completion whose content is not a verdict) and ``echo_auth`` (a 500
whose body echoes the Authorization header, as a careless proxy might).
"""

from __future__ import annotations

import json
import random
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = ("429", "500", "hang", "malformed_body", "truncated", "bad_verdict")
_CLAIM = re.compile(r"Claim: (.*)")


def default_verdict(user_text: str) -> dict[str, Any]:
    """Misaligned when the reasoning says MISALIGNED, so tests control verdicts through inputs."""
    if "MISALIGNED" in user_text:
        return {"aligns": False, "type": "contradiction", "why": "The reasoning says otherwise."}
    return {"aligns": True, "type": None, "why": "The reasoning supports the answer."}


@dataclass
class Request:
    claim: str
    fault: str | None
    authorization: str
    at: float


class _Server(ThreadingHTTPServer):
    """socketserver listens with a backlog of 5: when 16 clients connect at once, the kernel drops
    the surplus and they retry after 1 s. A real endpoint queues hundreds; so does this one."""

    request_queue_size = 128
    daemon_threads = True


@dataclass
class LoopbackOpenAI:
    latency: float = 0.0
    fault_rate: float = 0.0
    faults: tuple[str, ...] = FAULTS
    seed: int = 0
    retry_after: str = "1"
    hang_seconds: float = 5.0
    verdict: Callable[[str], dict[str, Any]] = default_verdict
    # script(request_number, claim) -> fault or None; overrides fault_rate when set
    script: Callable[[int, str], str | None] | None = None
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(self.seed)
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._hanging = 0

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> LoopbackOpenAI:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # headers and body go out in two writes: without NODELAY, Nagle's algorithm and
                # the client's delayed ACK would add ~40 ms to every response
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                if self.path.rstrip("/").endswith("/models"):
                    owner._send_json(self, 200, {"object": "list", "data": [{"id": "loopback"}]})
                else:
                    owner._send_json(self, 404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                owner._handle(self, body)

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> LoopbackOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    # -- queries for tests -------------------------------------------------------------------
    def claims(self) -> list[str]:
        with self._lock:
            return [r.claim for r in self.requests]

    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def hanging(self) -> int:
        """Requests with the ``hang`` fault still being held (not yet past ``hang_seconds``)."""
        with self._lock:
            return self._hanging

    # -- behaviour ---------------------------------------------------------------------------
    def _choose_fault(self, number: int, claim: str) -> str | None:
        if self.script is not None:
            return self.script(number, claim)
        with self._lock:
            if self._rng.random() < self.fault_rate:
                return self._rng.choice(self.faults)
        return None

    @staticmethod
    def _send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any,
                   headers: dict[str, str] | None = None) -> None:  # fmt: skip
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

    def _completion(self, body: dict[str, Any], content: str) -> dict[str, Any]:
        prompt_chars = sum(len(m.get("content", "")) for m in body.get("messages", []))
        return {
            "id": "chatcmpl-loopback",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "loopback"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_chars // 4,
                "completion_tokens": len(content) // 4,
                "total_tokens": prompt_chars // 4 + len(content) // 4,
            },
        }

    def _handle(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        user = next((m["content"] for m in body.get("messages", []) if m["role"] == "user"), "")
        found = _CLAIM.search(user)
        claim = found.group(1).strip() if found else ""
        with self._lock:
            number = len(self.requests)
        fault = self._choose_fault(number, claim)
        with self._lock:
            self.requests.append(
                Request(claim, fault, handler.headers.get("Authorization", ""), time.time())
            )
        if self.latency:
            time.sleep(self.latency)
        try:
            self._respond(handler, body, user, fault)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): nothing to do

    def _respond(self, handler: BaseHTTPRequestHandler, body: dict[str, Any], user: str,
                 fault: str | None) -> None:  # fmt: skip
        if fault == "429":
            self._send_json(handler, 429, {"error": {"message": "rate limited", "type": "requests",
                                                     "code": "rate_limit_exceeded"}},
                            {"Retry-After": self.retry_after})  # fmt: skip
        elif fault == "500":
            self._send_json(handler, 500, {"error": {"message": "internal error"}})
        elif fault == "echo_auth":
            auth = handler.headers.get("Authorization", "")
            self._send_json(handler, 500, {"error": {"message": f"bad upstream for {auth}"}})
        elif fault == "hang":
            with self._lock:
                self._hanging += 1
            try:
                self._stop.wait(self.hang_seconds)
            finally:
                with self._lock:
                    self._hanging -= 1
            handler.close_connection = True
        elif fault == "malformed_body":
            data = b'{"id": "chatcmpl-x", "choices": [ {"message": oops'
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        elif fault == "truncated":
            data = json.dumps(self._completion(body, json.dumps(self.verdict(user)))).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data[: len(data) // 2])
            handler.wfile.flush()
            handler.close_connection = True
        elif fault == "bad_verdict":
            payload = self._completion(body, "I think the reasoning mostly supports it.")
            self._send_json(handler, 200, payload)
        else:
            self._send_json(handler, 200, self._completion(body, json.dumps(self.verdict(user))))
