"""Fixtures of the LLM proposer tests: a local chat endpoint the real `openai` client reaches
through OPENAI_BASE_URL, and a real lowered softmax subgraph with its KernelSpec."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # chat_server here, synthetic in tests/search

from chat_server import ChatServer  # noqa: E402
from helpers import subgraphs_of  # noqa: E402

from kernelpro_backend.search import LLMProposer  # noqa: E402

# Retries in tests wait milliseconds, not seconds.
FAST = {"backoff_s": 0.001, "max_backoff_s": 0.01, "timeout_s": 10.0}


@pytest.fixture
def serve(monkeypatch):
    """serve(script) -> a started ChatServer that OPENAI_BASE_URL points at."""
    servers: list[ChatServer] = []

    def start(script) -> ChatServer:
        server = ChatServer(script).__enter__()
        servers.append(server)
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        monkeypatch.delenv("OPENAI_MODEL", raising=False)
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


@pytest.fixture
def llm_proposer():
    """llm_proposer(**kwargs) -> the proposer for the endpoint in the environment, with
    millisecond retries."""

    def make(**kwargs) -> LLMProposer:
        return LLMProposer.from_environ(client_options=FAST, **kwargs)

    return make


@pytest.fixture(scope="session")
def softmax_subgraph():
    torch._dynamo.reset()
    (sg,) = subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(8, 40), train=False)
    return sg
