"""ChatClient against a local OpenAI-compatible server through the real `openai` client: setup
errors that say what to set, retries with backoff on transient errors, give-up after the bound,
response_format dropped for servers that reject it, counts for the search log."""

from __future__ import annotations

import logging
import socket
import sys

import pytest
from chat_server import Reply

from kernelpro_backend.search.llm import DEFAULT_MODEL, ChatClient, LLMSetupError

FAST = {"backoff_s": 0.001, "max_backoff_s": 0.01, "timeout_s": 10.0}
MESSAGES = [{"role": "user", "content": "answer in JSON"}]


def test_missing_endpoint_settings_say_what_to_set():
    with pytest.raises(LLMSetupError, match="OPENAI_BASE_URL and OPENAI_API_KEY") as e:
        ChatClient.from_environ(environ={})
    assert "proposer='rules'" in str(e.value)
    with pytest.raises(LLMSetupError, match="needs OPENAI_API_KEY set"):
        ChatClient.from_environ(environ={"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"})


def test_missing_openai_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai -> ImportError
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "OPENAI_API_KEY": "k"}
    with pytest.raises(LLMSetupError, match="pip install 'openai>=1.0'"):
        ChatClient.from_environ(environ=env)


def test_model_comes_from_the_argument_then_openai_model_then_the_default():
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "OPENAI_API_KEY": "k"}
    assert ChatClient.from_environ(environ=env).model == DEFAULT_MODEL
    env["OPENAI_MODEL"] = "local-coder"
    assert ChatClient.from_environ(environ=env).model == "local-coder"
    assert ChatClient.from_environ("chosen", environ=env).model == "chosen"


def test_an_answer_and_its_counts(serve):
    server = serve(['{"proposals": []}'])
    client = ChatClient.from_environ("m1", **FAST)
    answer = client.complete(MESSAGES)
    assert answer is not None and answer.text == '{"proposals": []}'
    assert answer.finish_reason == "stop"
    [request] = server.requests
    assert request["model"] == "m1" and request["messages"] == MESSAGES
    assert request["response_format"] == {"type": "json_object"}
    s = client.stats
    assert (s.requests, s.retries, s.failed_calls) == (1, 0, 0)
    assert (s.prompt_tokens, s.completion_tokens) == (100, 20) and s.latency_s > 0


@pytest.mark.parametrize("status", [500, 503, 429])
def test_transient_errors_are_retried_with_backoff(serve, status, caplog):
    server = serve([Reply(status=status), Reply(status=status), '{"proposals": []}'])
    slept: list[float] = []
    client = ChatClient.from_environ(sleep=slept.append, **FAST)
    with caplog.at_level(logging.INFO, logger="kernelpro.llm"):
        answer = client.complete(MESSAGES)
    assert answer is not None and answer.text == '{"proposals": []}'
    assert len(server.requests) == 3
    assert slept == [0.001, 0.002]  # exponential backoff
    assert client.stats.retries == 2 and client.stats.requests == 3
    assert f"{status}" in caplog.text and "retry 1/3" in caplog.text


def test_retry_after_is_honoured_up_to_the_cap(serve):
    serve([Reply(status=429, headers=(("Retry-After", "5"),)), "{}"])
    slept: list[float] = []
    client = ChatClient.from_environ(sleep=slept.append, **FAST)
    assert client.complete(MESSAGES) is not None
    assert slept == [0.01]  # 5 s asked, capped at max_backoff_s


def test_retries_are_bounded_and_the_give_up_is_logged(serve, caplog):
    server = serve([Reply(status=500)] * 10)
    client = ChatClient.from_environ(retries=2, **FAST)
    with caplog.at_level(logging.WARNING, logger="kernelpro.llm"):
        assert client.complete(MESSAGES) is None
    assert len(server.requests) == 3  # 1 + 2 retries
    assert client.stats.failed_calls == 1
    assert "failed 3 times" in caplog.text and "no proposals" in caplog.text


def test_connection_refused_is_transient(monkeypatch, caplog):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": "k"}
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    client = ChatClient.from_environ(environ=env, retries=1, **FAST)
    with caplog.at_level(logging.INFO, logger="kernelpro.llm"):
        assert client.complete(MESSAGES) is None
    assert client.stats.requests == 2 and client.stats.retries == 1
    assert "APIConnectionError" in caplog.text and "failed 2 times" in caplog.text


def test_a_server_that_rejects_response_format_is_asked_without_it(serve, caplog):
    server = serve([Reply(status=400, content="response_format not supported"), "{}", "{}"])
    client = ChatClient.from_environ(**FAST)
    with caplog.at_level(logging.WARNING, logger="kernelpro.llm"):
        assert client.complete(MESSAGES) is not None
        assert client.complete(MESSAGES) is not None
    assert [("response_format" in r) for r in server.requests] == [True, False, False]
    assert "without it" in caplog.text and client.stats.retries == 0


def test_a_refused_request_gives_no_answer_and_is_logged(serve, caplog):
    serve([Reply(status=400, content="prompt too long")] * 2)
    client = ChatClient.from_environ(json_mode=False, **FAST)
    with caplog.at_level(logging.WARNING, logger="kernelpro.llm"):
        assert client.complete(MESSAGES) is None
    assert "refused the request (400" in caplog.text and client.stats.failed_calls == 1


@pytest.mark.parametrize(
    ("status", "what"), [(401, "check OPENAI_API_KEY"), (404, "the model name")]
)
def test_errors_no_retry_can_fix_raise_with_what_to_check(serve, status, what):
    server = serve([Reply(status=status)] * 3)
    client = ChatClient.from_environ(**FAST)
    with pytest.raises(LLMSetupError, match=what):
        client.complete(MESSAGES)
    assert len(server.requests) == 1


def test_a_body_that_is_no_chat_completion_gives_no_answer_and_is_logged(serve, caplog):
    serve([Reply(raw=b"<html>proxy error</html>"), Reply(raw=b'{"object": "chat.completion"}')])
    client = ChatClient.from_environ(**FAST)
    with caplog.at_level(logging.WARNING, logger="kernelpro.llm"):
        assert client.complete(MESSAGES) is None  # the client cannot parse it
        assert "cannot read" in caplog.text and client.stats.failed_calls == 1
        answer = client.complete(MESSAGES)  # JSON without choices: an empty answer
    assert answer is not None and answer.text == ""
