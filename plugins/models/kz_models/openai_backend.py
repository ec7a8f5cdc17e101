"""The ``openai`` policy: any OpenAI-compatible chat-completions endpoint (vLLM and SGLang servers, `kz serve`,
hosted teachers for distillation). One request per prompt (``n`` samples each), at most ``concurrency`` in
flight, retried with exponential backoff on connection failures, timeouts, 408/429 and 5xx; any other HTTP
error is a one-line ``PolicyError`` at once. Standard library only.

Spec: ``openai:URL[#MODEL]``, URL the base URL (usually ending in ``/v1``). The model is the ``#MODEL``
suffix, else ``KZ_OPENAI_MODEL``, else the one model the server lists at ``GET URL/models``.

Environment:
  KZ_OPENAI_API_KEY / OPENAI_API_KEY   sent as ``Authorization: Bearer KEY`` (the first one set)
  KZ_OPENAI_CONCURRENCY                requests in flight per policy (default 8)
  KZ_OPENAI_RETRIES                    attempts per request, first one included (default 4)
  KZ_OPENAI_CONNECT_TIMEOUT            seconds to connect (default 10)
  KZ_OPENAI_TIMEOUT                    seconds to wait on a silent server, per read (default 600)
  KZ_OPENAI_BACKOFF                    first retry delay in seconds, doubled per retry up to 30 (default 1)
  KZ_OPENAI_LOGPROBS                   0 to stop asking for logprobs (endpoints that refuse them)
"""

from __future__ import annotations

import http.client
import json
import os
import random
import ssl
import threading
import time
import urllib.parse
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

from kzcore import Chat, Completion, PolicyError, SamplingParams

RETRY_STATUSES = frozenset({408, 429})  # and every 5xx but 501 Not Implemented
MAX_BACKOFF_S = 30.0
FINISH_REASONS = {"stop": "stop", "eos": "stop", "tool_calls": "stop", None: "stop", "length": "length"}


class _Retryable(Exception):
    """One attempt failed in a way another attempt may not (network, timeout, 429, 5xx)."""

    def __init__(self, reason: str, retry_after: float | None = None, status: int | None = None):
        super().__init__(reason)
        self.reason, self.retry_after, self.status = reason, retry_after, status


class OpenAIPolicy:
    """Chat completions from an OpenAI-compatible server. Thread-safe; ``close()`` stops its thread pool."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        concurrency: int = 8,
        max_attempts: int = 4,
        connect_timeout: float = 10.0,
        read_timeout: float = 600.0,
        backoff: float = 1.0,
        logprobs: bool = True,
    ):
        parts = urllib.parse.urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PolicyError(
                f"openai: {base_url!r} is not an http(s) URL; expected e.g. openai:http://127.0.0.1:8000/v1"
            )
        if concurrency < 1 or max_attempts < 1 or connect_timeout <= 0 or read_timeout <= 0 or backoff < 0:
            raise PolicyError("openai: concurrency and attempts must be >= 1, timeouts > 0, backoff >= 0")
        self.base_url = base_url.rstrip("/")
        self._parts = parts
        self.model = model or None
        self.api_key = api_key or None
        self.concurrency, self.max_attempts = concurrency, max_attempts
        self.connect_timeout, self.read_timeout, self.backoff = connect_timeout, read_timeout, backoff
        self.logprobs = logprobs
        self.name = f"openai:{self.base_url}" + (f"#{self.model}" if self.model else "")
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kz-openai")
        self._model_lock = threading.Lock()

    @classmethod
    def from_spec(cls, spec: str) -> OpenAIPolicy:
        """``URL[#MODEL]`` plus the ``KZ_OPENAI_*`` / ``OPENAI_API_KEY`` environment (module docstring)."""
        url, _, model = spec.partition("#")
        if not url:
            raise PolicyError("openai: expected openai:URL[#MODEL], e.g. openai:http://127.0.0.1:8000/v1#my-model")
        return cls(
            url,
            model or os.environ.get("KZ_OPENAI_MODEL"),
            api_key=os.environ.get("KZ_OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY"),
            concurrency=_env_number("KZ_OPENAI_CONCURRENCY", 8, int),
            max_attempts=_env_number("KZ_OPENAI_RETRIES", 4, int),
            connect_timeout=_env_number("KZ_OPENAI_CONNECT_TIMEOUT", 10.0, float),
            read_timeout=_env_number("KZ_OPENAI_TIMEOUT", 600.0, float),
            backoff=_env_number("KZ_OPENAI_BACKOFF", 1.0, float),
            logprobs=os.environ.get("KZ_OPENAI_LOGPROBS", "1").strip().lower() not in ("0", "false", "no", ""),
        )

    # -- the policy protocol ------------------------------------------------------------------------------

    def generate(self, prompts: list[Chat], params: SamplingParams) -> list[list[Completion]]:
        """``params.n`` completions per prompt, in prompt order; the first failing request raises
        ``PolicyError`` (requests not yet sent are cancelled)."""
        if not prompts:
            return []
        model = self._resolve_model()
        futures = [self._pool.submit(self._complete, i, chat, params, model) for i, chat in enumerate(prompts)]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for future in futures:
            if future in done and future.exception() is not None:
                for other in futures:
                    other.cancel()
                raise future.exception()
        return [future.result() for future in futures]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- one prompt ---------------------------------------------------------------------------------------

    def _complete(self, prompt_index: int, chat: Chat, params: SamplingParams, model: str) -> list[Completion]:
        body = {
            "model": model,
            "messages": chat,
            "n": params.n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if self.logprobs:
            body["logprobs"] = True
        response = self._request("POST", "/chat/completions", body)
        return self._completions(prompt_index, params.n, response)

    def _completions(self, prompt_index: int, n: int, response: Any) -> list[Completion]:
        choices = response.get("choices") if isinstance(response, dict) else None
        if not isinstance(choices, list) or len(choices) != n:
            got = len(choices) if isinstance(choices, list) else "no"
            raise PolicyError(f"openai {self.base_url}: asked for n={n} completions, the server returned {got} choices")
        completions = []
        for position, choice in enumerate(sorted(choices, key=lambda c: c.get("index", 0))):
            message = choice.get("message") or {}
            reason = choice.get("finish_reason")
            try:
                token_ids, logprobs = _token_logprobs(choice.get("logprobs"))
            except (KeyError, TypeError, ValueError) as exc:
                raise PolicyError(f"openai {self.base_url}: malformed logprobs in the answer: {exc!r}") from None
            completions.append(
                Completion(
                    text=message.get("content") or "",
                    prompt_index=prompt_index,
                    sample_index=position,
                    token_ids=token_ids,
                    logprobs=logprobs,
                    finish_reason=FINISH_REASONS.get(reason, "error"),
                )
            )
        return completions

    def _resolve_model(self) -> str:
        with self._model_lock:
            if self.model is None:
                listed = self._request("GET", "/models", None)
                ids = [m.get("id") for m in (listed.get("data") or []) if isinstance(m, dict)]
                if len(ids) != 1:
                    names = ", ".join(map(str, ids)) or "none"
                    raise PolicyError(
                        f"openai {self.base_url} serves {len(ids)} models ({names}); name one as openai:URL#MODEL"
                    )
                self.model = str(ids[0])
            return self.model

    # -- HTTP ---------------------------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """One JSON request with retries; raises ``PolicyError`` with the last failure, on one line."""
        url = self.base_url + path
        failure: _Retryable | None = None
        for attempt in range(1, self.max_attempts + 1):
            if failure is not None:
                time.sleep(self._delay(attempt - 1, failure.retry_after))
            try:
                return self._attempt(method, path, body)
            except _Retryable as exc:
                failure = exc
        assert failure is not None
        attempts = f"{self.max_attempts} attempt" + ("s" if self.max_attempts > 1 else "")
        if failure.status is None:
            raise PolicyError(f"openai: no answer from {url} after {attempts}: {failure.reason}")
        raise PolicyError(f"openai {url}: HTTP {failure.status} after {attempts}: {failure.reason}")

    def _delay(self, retry: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter (so many clients do not retry in step); a server's Retry-After
        wins when it asks for longer."""
        delay = min(self.backoff * 2 ** (retry - 1), MAX_BACKOFF_S)
        delay = delay / 2 + random.uniform(0, delay / 2)
        return min(max(delay, retry_after or 0.0), MAX_BACKOFF_S)

    def _attempt(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        parts = self._parts
        connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = connection_class(parts.hostname, parts.port, timeout=self.connect_timeout)
        headers = {"Accept": "application/json", "User-Agent": "kzcore-openai"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            try:
                connection.connect()
            except TimeoutError:
                raise _Retryable(f"connect timed out after {self.connect_timeout:g} s") from None
            connection.sock.settimeout(self.read_timeout)
            connection.request(method, parts.path + path, body=data, headers=headers)
            response = connection.getresponse()
            status, raw = response.status, response.read()
            retry_after = response.getheader("Retry-After")
        except _Retryable:
            raise
        except TimeoutError:
            raise _Retryable(f"timed out after {self.read_timeout:g} s without an answer") from None
        except ssl.SSLCertVerificationError as exc:
            raise PolicyError(f"openai {self.base_url}: TLS certificate rejected: {exc.verify_message}") from None
        except ConnectionRefusedError:
            raise _Retryable("connection refused") from None
        except (OSError, http.client.HTTPException) as exc:
            raise _Retryable(_one_line(f"{type(exc).__name__}: {exc}")) from None
        finally:
            connection.close()
        return self._decode(method, path, status, raw, retry_after)

    def _decode(self, method: str, path: str, status: int, raw: bytes, retry_after: str | None) -> dict[str, Any]:
        try:
            payload = json.loads(raw) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            payload = None
        message = _error_message(payload, raw)
        if status in RETRY_STATUSES or (status >= 500 and status != 501):
            raise _Retryable(message, _seconds(retry_after), status)
        url = self.base_url + path
        if status == 401 or status == 403:
            hint = " (set KZ_OPENAI_API_KEY or OPENAI_API_KEY)"
            raise PolicyError(f"openai {url}: HTTP {status}: {message}{hint}")
        if status >= 300:
            raise PolicyError(f"openai {url}: HTTP {status}: {message}")
        if not isinstance(payload, dict):
            raise PolicyError(
                f"openai {method} {url}: the answer is not a JSON object: {_one_line(raw[:200].decode(errors='replace'))}"
            )
        if "error" in payload and "choices" not in payload and "data" not in payload:
            raise PolicyError(f"openai {url}: {message}")
        return payload


def load_openai_policy(arg: str) -> OpenAIPolicy:
    """The ``openai`` factory: ``arg`` is ``URL[#MODEL]``."""
    return OpenAIPolicy.from_spec(arg)


def _token_logprobs(logprobs: Any) -> tuple[tuple[int, ...] | None, tuple[float, ...] | None]:
    """Per-token logprobs from ``choice.logprobs.content``, and the token ids when the server wrote tokens
    as ``token_id:N`` (vLLM's ``--return-tokens-as-token-ids``, `kz serve`)."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return None, None
    values = tuple(float(t["logprob"]) for t in content)
    tokens = [str(t.get("token", "")) for t in content]
    ids = None
    if all(t.startswith("token_id:") and t[len("token_id:") :].isdigit() for t in tokens):
        ids = tuple(int(t[len("token_id:") :]) for t in tokens)
    return ids, values


def _error_message(payload: Any, raw: bytes) -> str:
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict) and error.get("message"):
            return _one_line(str(error["message"]))
        if isinstance(error, str):
            return _one_line(error)
        if payload.get("detail"):
            return _one_line(str(payload["detail"]))
    return _one_line(raw[:500].decode(errors="replace")) or "(empty body)"


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: use our own backoff


def _env_number(name: str, default, kind):
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    try:
        return kind(value)
    except ValueError:
        raise PolicyError(f"{name}={value!r} is not a number") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())
