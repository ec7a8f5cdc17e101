"""The ``openai`` policy backend against a real ``kz serve`` process on loopback (serving the fake echo policy
of tests/fakes_openai.py), and ``kzcore.serve`` in-process. No mocked HTTP: every request crosses a socket."""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kzcore.errors import KzError
from kzcore.policy import PolicyError, SamplingParams, load_policy
from kzcore.serve import make_server, serve
from tests.fakes_openai import EchoPolicy, echo_logprob

ROOT = Path(__file__).resolve().parent.parent
FAKES = "tests.fakes_openai"
OPENAI_ENV = [
    "OPENAI_API_KEY",
    "KZ_OPENAI_API_KEY",
    "KZ_OPENAI_MODEL",
    "KZ_OPENAI_CONCURRENCY",
    "KZ_OPENAI_RETRIES",
    "KZ_OPENAI_CONNECT_TIMEOUT",
    "KZ_OPENAI_TIMEOUT",
    "KZ_OPENAI_BACKOFF",
    "KZ_OPENAI_LOGPROBS",
]


def OpenAIPolicy(*args, **kwargs):
    from kz_models.openai_backend import OpenAIPolicy as policy_class

    return policy_class(*args, **kwargs)


@contextlib.contextmanager
def served(log_dir: Path, *args: str, env: dict[str, str] | None = None):
    """``python -m kzcore.serve --policy echo`` on a free loopback port; yields its base URL."""
    environ = {**os.environ, "KZ_LOAD_PLUGINS": "", "HF_HUB_OFFLINE": "1", **(env or {})}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    log = log_dir / f"serve-{time.monotonic_ns()}.log"
    command = [sys.executable, "-m", "kzcore.serve", "--policy", "echo", "--plugins", FAKES, "--port", "0", *args]
    with open(log, "w") as stderr:
        proc = subprocess.Popen(command, cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("kz serve: listening on http://127.0.0.1:"), (line, log.read_text())
        yield line.split()[-1]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    with served(tmp_path_factory.mktemp("serve"), "--model-name", "echo-model") as url:
        yield url


@pytest.fixture(autouse=True)
def clean_openai_env(monkeypatch):
    for name in OPENAI_ENV:
        monkeypatch.delenv(name, raising=False)


def health(url: str) -> dict:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=10) as response:
        return json.loads(response.read())


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


def expected(message: str, sample: int, limit: int = 1024) -> str:
    return f"{message[::-1]} #{sample}"[:limit]


# --- the backend against a real server process ---------------------------------------------------------


def test_round_trip_text_n_finish_reason_logprobs_token_ids(server_url, plugins, monkeypatch):
    monkeypatch.setenv("KZ_OPENAI_CONCURRENCY", "2")
    policy = load_policy(f"openai:{server_url}", plugins(FAKES))  # model found through GET /v1/models
    try:
        assert policy.concurrency == 2
        results = policy.generate([user("hello"), user("a much longer prompt")], SamplingParams(n=3, max_new_tokens=12))
    finally:
        policy.close()
    assert policy.model == "echo-model"
    assert len(results) == 2 and [len(r) for r in results] == [3, 3]
    for prompt_index, (message, samples) in enumerate(zip(["hello", "a much longer prompt"], results)):
        for sample_index, completion in enumerate(samples):
            text = expected(message, sample_index, 12)
            assert (completion.prompt_index, completion.sample_index) == (prompt_index, sample_index)
            assert completion.text == text
            assert completion.finish_reason == ("stop" if len(text) < 12 else "length")
            assert completion.token_ids == tuple(ord(c) for c in text)
            assert completion.logprobs == tuple(echo_logprob(k) for k in range(len(text)))
    assert results[0][0].finish_reason == "stop" and results[1][0].finish_reason == "length"


def test_sampling_params_and_stop_strings_reach_the_server(server_url):
    policy = OpenAIPolicy(server_url, "echo-model", logprobs=False)
    try:
        params = SamplingParams(n=2, temperature=0.3, top_p=0.5, max_new_tokens=77, seed=5, stop=("|", "END"))
        (sent,) = policy.generate([user("!params")], params)
        cut = policy.generate([user("xyz|abc")], SamplingParams(stop=["|"]))
    finally:
        policy.close()
    assert [json.loads(c.text) for c in sent] == [
        {"n": 2, "temperature": 0.3, "top_p": 0.5, "max_new_tokens": 77, "seed": 5, "stop": ["|", "END"]}
    ] * 2
    # "xyz|abc" reversed is "cba|zyx #0": the server cut it before the stop string
    assert cut[0][0].text == "cba" and cut[0][0].finish_reason == "stop"
    assert cut[0][0].logprobs is None  # not asked for


def test_context_overflow_is_a_400_policy_error_without_retry(server_url):
    policy = OpenAIPolicy(server_url, "echo-model", max_attempts=4, backoff=1.0)
    before = health(server_url)["completions_requests"]
    start = time.monotonic()
    try:
        with pytest.raises(PolicyError) as caught:
            policy.generate([user("x" * 500)], SamplingParams())
    finally:
        policy.close()
    message = str(caught.value)
    assert "HTTP 400: context overflow: the prompt has 508 tokens, the limit is 200" in message
    assert "\n" not in message
    assert health(server_url)["completions_requests"] - before == 1
    assert time.monotonic() - start < 1.0  # no backoff sleep either


def test_server_errors_are_retried_with_backoff(server_url):
    policy = OpenAIPolicy(server_url, "echo-model", max_attempts=3, backoff=0.05)
    try:
        before = health(server_url)["completions_requests"]
        (recovered,) = policy.generate([user("!fail:twice:2 olleh")], SamplingParams(max_new_tokens=5))
        assert recovered[0].text == "hello"
        assert health(server_url)["completions_requests"] - before == 3
        before = health(server_url)["completions_requests"]
        with pytest.raises(PolicyError, match=r"HTTP 500 after 3 attempts: RuntimeError: echo failure 3 of 9 for k9$"):
            policy.generate([user("!fail:k9:9 x")], SamplingParams())
        assert health(server_url)["completions_requests"] - before == 3
    finally:
        policy.close()


def test_connection_refused_fails_after_retries_with_backoff():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    policy = OpenAIPolicy(url, "m", max_attempts=3, backoff=0.2)
    start = time.monotonic()
    try:
        with pytest.raises(PolicyError) as caught:
            policy.generate([user("hi")], SamplingParams())
    finally:
        policy.close()
    elapsed = time.monotonic() - start
    assert str(caught.value) == f"openai: no answer from {url}/chat/completions after 3 attempts: connection refused"
    assert 0.3 <= elapsed < 3.0  # backoff 0.2 then 0.4 s, each jittered down to no less than half


def test_a_server_that_never_answers_times_out_and_is_retried():
    accepted: list[socket.socket] = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def accept_and_stay_silent():
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept_and_stay_silent, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    policy = OpenAIPolicy(url, "m", max_attempts=2, read_timeout=0.4, backoff=0.05)
    outcome: list[BaseException] = []

    def generate():  # in a thread, so a missing timeout fails this test instead of hanging it
        try:
            policy.generate([user("hi")], SamplingParams())
        except BaseException as exc:
            outcome.append(exc)

    start = time.monotonic()
    try:
        caller = threading.Thread(target=generate, daemon=True)
        caller.start()
        caller.join(timeout=10)
        elapsed = time.monotonic() - start
    finally:
        policy.close()
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()
    assert not caller.is_alive(), "generate() hung on a server that never answers"
    assert len(outcome) == 1 and isinstance(outcome[0], PolicyError)
    caught = outcome[0]
    assert str(caught) == (
        f"openai: no answer from {url}/chat/completions after 2 attempts: timed out after 0.4 s without an answer"
    )
    assert len(accepted) == 2
    assert 0.8 <= elapsed < 3.0


def test_concurrency_limit_is_respected(tmp_path):
    with served(tmp_path) as url:
        policy = OpenAIPolicy(url, concurrency=3)
        try:
            prompts = [user(f"!slow:0.1 p{i}") for i in range(7)]
            results = policy.generate(prompts, SamplingParams())
        finally:
            policy.close()
        stats = health(url)
    assert [r[0].text for r in results] == [expected(f"p{i}", 0) for i in range(7)]
    assert stats["completions_requests"] == 7
    # generation is serialised server-side, so the requests pile up: exactly as many as the client allows
    assert stats["max_in_flight"] == 3


def test_api_key_comes_from_the_environment(tmp_path, plugins, monkeypatch):
    pm = plugins(FAKES)
    with served(tmp_path, env={"KZ_SERVE_API_KEY": "s3cret"}) as url:
        monkeypatch.setenv("KZ_OPENAI_MODEL", "echo")
        monkeypatch.setenv("KZ_OPENAI_RETRIES", "3")
        for key_env, key in [(None, None), ("OPENAI_API_KEY", "wrong"), ("KZ_OPENAI_API_KEY", "wrong")]:
            if key_env:
                monkeypatch.setenv(key_env, key)
            policy = load_policy(f"openai:{url}", pm)
            with pytest.raises(PolicyError, match=r"HTTP 401: missing or wrong API key .*set KZ_OPENAI_API_KEY"):
                policy.generate([user("hi")], SamplingParams())
            policy.close()
        assert health(url)["completions_requests"] == 3  # one request per policy: a 401 is not retried
        monkeypatch.setenv("KZ_OPENAI_API_KEY", "s3cret")  # KZ_OPENAI_API_KEY wins over OPENAI_API_KEY
        policy = load_policy(f"openai:{url}", pm)
        try:
            assert policy.generate([user("hi")], SamplingParams())[0][0].text == "ih #0"
        finally:
            policy.close()


def test_spec_and_settings(monkeypatch):
    from kz_models.openai_backend import OpenAIPolicy as policy_class

    policy = policy_class.from_spec("http://127.0.0.1:9/v1/#served-name")
    assert (policy.base_url, policy.model, policy.name) == (
        "http://127.0.0.1:9/v1",
        "served-name",
        "openai:http://127.0.0.1:9/v1#served-name",
    )
    assert (policy.concurrency, policy.max_attempts, policy.read_timeout, policy.logprobs) == (8, 4, 600.0, True)
    policy.close()
    with pytest.raises(PolicyError, match="expected openai:URL"):
        policy_class.from_spec("")
    with pytest.raises(PolicyError, match="is not an http"):
        policy_class.from_spec("127.0.0.1:8000/v1")
    monkeypatch.setenv("KZ_OPENAI_RETRIES", "many")
    with pytest.raises(PolicyError, match="KZ_OPENAI_RETRIES='many' is not a number"):
        policy_class.from_spec("http://127.0.0.1:9/v1")


# --- kzcore.serve in-process --------------------------------------------------------------------------


@pytest.fixture
def echo_server():
    server = make_server(EchoPolicy(limit=50), model_name="echo-x")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def call(url: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url + path, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_models_and_health(echo_server):
    assert echo_server.startswith("http://127.0.0.1:") and echo_server.endswith("/v1")
    status, models = call(echo_server, "/models")
    assert status == 200 and [m["id"] for m in models["data"]] == ["echo-x"]
    status, stats = call(echo_server.removesuffix("/v1"), "/health")
    assert status == 200 and stats["status"] == "ok" and stats["completions_requests"] == 0


def test_chat_completion_response_shape(echo_server):
    body = {"model": "whatever", "messages": user("abc"), "n": 2, "max_tokens": 4, "logprobs": True, "stop": "#1"}
    status, response = call(echo_server, "/chat/completions", json.dumps(body).encode())
    assert status == 200 and response["object"] == "chat.completion" and response["model"] == "echo-x"
    first, second = response["choices"]
    assert first["message"] == {"role": "assistant", "content": "cba "} and first["finish_reason"] == "length"
    assert second["message"]["content"] == "cba " and second["finish_reason"] == "stop"  # cut before "#1"
    assert [t["token"] for t in first["logprobs"]["content"]] == [
        "token_id:99",
        "token_id:98",
        "token_id:97",
        "token_id:32",
    ]
    assert [t["logprob"] for t in first["logprobs"]["content"]] == [echo_logprob(k) for k in range(4)]
    assert response["usage"] == {"prompt_tokens": 11, "completion_tokens": 8, "total_tokens": 19}
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "de"}, {"type": "text", "text": "f"}]}]}
    status, response = call(echo_server, "/chat/completions", json.dumps(body).encode())
    assert status == 200 and response["choices"][0]["message"]["content"] == "fed #0"
    assert response["choices"][0]["logprobs"] is None  # not asked for


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "request body is not JSON"),
        (b"[1]", 400, "request body must be a JSON object"),
        (b"{}", 400, "messages must be a non-empty list"),
        (b'{"messages": [{"role": "user"}]}', 400, "messages[0].content must be a string"),
        (b'{"messages": [{"role": "user", "content": "a"}], "n": 0}', 400, "bad sampling parameter: 'n' must be >= 1"),
        (b'{"messages": [{"role": "user", "content": "a"}], "top_p": "x"}', 400, "top_p must be a number"),
        (b'{"messages": [{"role": "user", "content": "a"}], "stop": 3}', 400, "stop must be a string or a list"),
        (b'{"messages": [{"role": "user", "content": "a"}], "stream": true}', 400, "streaming is not supported"),
        (b'{"messages": [{"role": "user", "content": "' + b"y" * 60 + b'"}]}', 400, "context overflow"),
        (b'{"messages": [{"role": "user", "content": "!crash"}]}', 500, "RuntimeError: echo crashed on purpose"),
    ],
)
def test_bad_requests_get_openai_style_errors(echo_server, body, status, message):
    got_status, response = call(echo_server, "/chat/completions", body)
    assert got_status == status
    assert message in response["error"]["message"]
    assert response["error"]["type"] == ("server_error" if status == 500 else "invalid_request_error")


def test_unknown_route_is_404(echo_server):
    status, response = call(echo_server, "/completions", b"{}")
    assert status == 404 and "no route POST /v1/completions" in response["error"]["message"]


def test_serve_on_a_taken_port_is_a_one_line_error(plugins):
    pm = plugins(FAKES)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(KzError, match=rf"^cannot listen on 127.0.0.1:{port}: Address already in use$"):
            serve("echo", "127.0.0.1", port, pm=pm)
