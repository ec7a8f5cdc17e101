"""`kz serve`: an OpenAI-compatible chat-completions server over any registered policy, so a local model (an
hf policy, a checkpoint mid-training) can stand in for a hosted teacher and the ``openai`` backend, vLLM
clients and the ``openai`` SDK can all talk to it. Standard library only; one request generates at a time.

Endpoints: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health`` (no key needed; also reports
request counters). A policy's ``PolicyError`` (context overflow, bad input) is an HTTP 400 with its message;
any other failure is a 500. Logprob tokens are written as ``token_id:N`` (vLLM's
``--return-tokens-as-token-ids`` form) because a policy returns token ids, not token strings. A policy may
define ``count_prompt_tokens(chat) -> int`` to fill ``usage.prompt_tokens``.
"""

from __future__ import annotations

import argparse
import hmac
import json
import sys
import threading
import time
import traceback
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kzcore.errors import KzError
from kzcore.policy import Chat, Completion, Policy, PolicyError, SamplingParams

MAX_BODY_BYTES = 64 * 1024 * 1024
ROLES = ("system", "user", "assistant", "developer", "tool")
# SamplingParams field, request key, type
NUMERIC_FIELDS = (
    ("n", "n", int),
    ("temperature", "temperature", float),
    ("top_p", "top_p", float),
    ("max_new_tokens", "max_tokens", int),
    ("seed", "seed", int),
)


class RequestError(Exception):
    """A request the server refuses: answered with ``status`` and an OpenAI-style error object."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def payload(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": int(self.status)}}


class PolicyServer(ThreadingHTTPServer):
    """A threading HTTP server holding one policy; ``generate`` calls are serialised by ``policy_lock``
    because policies are not thread-safe. Counts requests for ``/health``."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, policy: Policy, model_name: str, api_key: str | None):
        super().__init__(address, ChatCompletionsHandler)
        self.policy = policy
        self.model_name = model_name
        self.api_key = api_key
        self.created = int(time.time())
        self.policy_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self.completions_requests = 0
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def request_started(self) -> None:
        with self._stats_lock:
            self.completions_requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def request_finished(self) -> None:
        with self._stats_lock:
            self.in_flight -= 1

    def stats(self) -> dict[str, Any]:
        with self._stats_lock:
            return {
                "status": "ok",
                "model": self.model_name,
                "completions_requests": self.completions_requests,
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
            }


class ChatCompletionsHandler(BaseHTTPRequestHandler):
    server: PolicyServer
    protocol_version = "HTTP/1.1"
    server_version = "kzcore-serve"
    timeout = 600  # an idle keep-alive connection is dropped after this many seconds

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would drown the URL line callers read; failures are reported below

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            if path == "/health":
                self._send_json(HTTPStatus.OK, self.server.stats())
            elif path == "/v1/models":
                self._check_api_key()
                model = {"id": self.server.model_name, "object": "model", "created": self.server.created}
                self._send_json(HTTPStatus.OK, {"object": "list", "data": [{**model, "owned_by": "kzcore"}]})
            else:
                raise RequestError(HTTPStatus.NOT_FOUND, f"no route GET {path}", "not_found_error")
        except RequestError as exc:
            self._send_json(exc.status, exc.payload())

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        counted = path == "/v1/chat/completions"
        if counted:
            self.server.request_started()
        try:
            status, payload = HTTPStatus.OK, self._post(path)
        except RequestError as exc:
            status, payload = exc.status, exc.payload()
        except Exception as exc:  # a bug must not leave the client waiting for an answer; keep serving
            traceback.print_exc(file=sys.stderr)
            message = _one_line(f"{type(exc).__name__}: {exc}")
            status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, RequestError(500, message, "server_error").payload()
        finally:
            if counted:  # before the answer is written, so a client never sees more in flight than it sent
                self.server.request_finished()
        self._send_json(status, payload)

    def _post(self, path: str) -> dict[str, Any]:
        body = self._read_body()
        if path != "/v1/chat/completions":
            raise RequestError(HTTPStatus.NOT_FOUND, f"no route POST {path}", "not_found_error")
        self._check_api_key()
        chat, params, want_logprobs = parse_request(body)
        try:
            with self.server.policy_lock:
                completions = self.server.policy.generate([chat], params)[0]
            prompt_tokens = _prompt_tokens(self.server.policy, chat)
        except PolicyError as exc:
            raise RequestError(HTTPStatus.BAD_REQUEST, _one_line(str(exc))) from exc
        return chat_completion_response(completions, self.server.model_name, want_logprobs, prompt_tokens)

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            raise RequestError(HTTPStatus.LENGTH_REQUIRED, "a request body with a Content-Length header is required")
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"request body over {MAX_BODY_BYTES} bytes")
        return self.rfile.read(int(length))

    def _check_api_key(self) -> None:
        if self.server.api_key is None:
            return
        given = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), self.server.api_key.encode()):
            raise RequestError(HTTPStatus.UNAUTHORIZED, "missing or wrong API key (Authorization: Bearer KEY)")

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def parse_request(body: bytes) -> tuple[Chat, SamplingParams, bool]:
    """The chat, the sampling parameters and whether logprobs were asked for, from a request body; a
    ``RequestError`` (400) names the first thing wrong."""
    try:
        request = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"request body is not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise RequestError(HTTPStatus.BAD_REQUEST, "request body must be a JSON object")
    if request.get("stream"):
        raise RequestError(HTTPStatus.BAD_REQUEST, "streaming is not supported; send stream=false", param="stream")
    chat = _parse_messages(request.get("messages"))
    stop = request.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise RequestError(HTTPStatus.BAD_REQUEST, "stop must be a string or a list of strings", param="stop")
    max_tokens = request.get("max_completion_tokens", request.get("max_tokens"))
    kwargs: dict[str, Any] = {"stop": tuple(stop)}
    for field, param, kind in NUMERIC_FIELDS:
        value = max_tokens if field == "max_new_tokens" else request.get(param)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and value != int(value)):
            raise RequestError(HTTPStatus.BAD_REQUEST, f"{param} must be a number, got {value!r}", param=param)
        kwargs[field] = kind(value)
    try:
        params = SamplingParams(**kwargs)
    except (TypeError, ValueError) as exc:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"bad sampling parameter: {_one_line(str(exc))}") from None
    logprobs = request.get("logprobs", False)
    if not isinstance(logprobs, bool):
        raise RequestError(HTTPStatus.BAD_REQUEST, "logprobs must be true or false", param="logprobs")
    return chat, params, logprobs


def _parse_messages(messages: Any) -> Chat:
    if not isinstance(messages, list) or not messages:
        raise RequestError(HTTPStatus.BAD_REQUEST, "messages must be a non-empty list", param="messages")
    chat = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise RequestError(
                HTTPStatus.BAD_REQUEST, f"messages[{i}] needs a role, one of {', '.join(ROLES)}", param="messages"
            )
        content = message.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if not isinstance(content, str):
            raise RequestError(HTTPStatus.BAD_REQUEST, f"messages[{i}].content must be a string", param="messages")
        chat.append({"role": message["role"], "content": content})
    return chat


def chat_completion_response(
    completions: list[Completion], model_name: str, want_logprobs: bool, prompt_tokens: int | None
) -> dict[str, Any]:
    choices = []
    for index, completion in enumerate(completions):
        logprobs = None
        if want_logprobs and completion.logprobs is not None:
            ids = completion.token_ids or (None,) * len(completion.logprobs)
            tokens = [
                {"token": "" if t is None else f"token_id:{t}", "logprob": lp}
                for t, lp in zip(ids, completion.logprobs)
            ]
            logprobs = {"content": [{**t, "bytes": None, "top_logprobs": []} for t in tokens]}
        choices.append(
            {
                "index": index,
                "message": {"role": "assistant", "content": completion.text},
                "finish_reason": completion.finish_reason,
                "logprobs": logprobs,
            }
        )
    response = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": choices,
    }
    if completions and all(c.token_ids is not None for c in completions):
        usage: dict[str, int] = {"completion_tokens": sum(len(c.token_ids) for c in completions)}
        if prompt_tokens is not None:
            usage = {
                "prompt_tokens": prompt_tokens,
                **usage,
                "total_tokens": prompt_tokens + usage["completion_tokens"],
            }
        response["usage"] = usage
    return response


def _prompt_tokens(policy: Policy, chat: Chat) -> int | None:
    count = getattr(policy, "count_prompt_tokens", None)
    return int(count(chat)) if callable(count) else None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def make_server(
    policy: Policy, host: str = "127.0.0.1", port: int = 0, model_name: str | None = None, api_key: str | None = None
) -> PolicyServer:
    """A bound (not yet serving) server for ``policy``; call ``serve_forever()``. ``port=0`` picks a free
    port (``server.url`` says which). With ``api_key`` set, ``/v1/*`` requires ``Authorization: Bearer KEY``."""
    name = model_name or getattr(policy, "name", None) or "kz"
    return PolicyServer((host, port), policy, name, api_key or None)


def serve(
    policy_spec: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    model_name: str | None = None,
    api_key: str | None = None,
    pm=None,
) -> None:
    """Load the policy named ``policy_spec`` (``NAME[:ARG]``) and serve it until interrupted. Prints
    ``kz serve: listening on http://HOST:PORT/v1`` once bound."""
    from kzcore.policy import load_policy

    policy = load_policy(policy_spec, pm)
    try:
        try:
            server = make_server(policy, host, port, model_name or policy_spec, api_key)
        except OSError as exc:
            raise KzError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        print(f"kz serve: listening on {server.url}", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    finally:
        policy.close()


def main(argv: list[str] | None = None) -> int:
    import os

    from kzcore.plugins import new_plugin_manager

    parser = argparse.ArgumentParser(prog="python -m kzcore.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", required=True, help="NAME[:ARG], e.g. hf:/models/qwen")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed)")
    parser.add_argument("--model-name", default=None, help="the model id clients see (default: the policy spec)")
    parser.add_argument("--plugins", default="", help="comma list of importable plugin specs to register")
    parser.epilog = "Set KZ_SERVE_API_KEY to require Authorization: Bearer KEY on /v1/*."
    args = parser.parse_args(argv)
    try:
        extra = [s.strip() for s in args.plugins.split(",") if s.strip()]
        pm = new_plugin_manager(extra=extra)
        api_key = os.environ.get("KZ_SERVE_API_KEY")
        serve(args.policy, args.host, args.port, model_name=args.model_name, api_key=api_key, pm=pm)
    except KzError as exc:
        print(f"kz serve: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
