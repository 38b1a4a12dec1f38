"""The composition root's choice of proposer: `options.proposer` is honoured, and "llm" without
its endpoint settings fails once, at set-up, saying what to set."""

from __future__ import annotations

import pytest

from kernelpro_backend.autotune import make_proposer
from kernelpro_backend.options import Options
from kernelpro_backend.search import LLMProposer, LLMSetupError, RuleProposer

ENDPOINT = {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "OPENAI_API_KEY": "k"}


def test_rules_by_default():
    assert isinstance(make_proposer(Options.resolve(environ={}), environ={}), RuleProposer)


def test_llm_without_endpoint_settings_says_what_to_set():
    options = Options.resolve(options={"proposer": "llm"}, environ={})
    with pytest.raises(LLMSetupError, match="needs OPENAI_BASE_URL and OPENAI_API_KEY set"):
        make_proposer(options, environ={})


def test_llm_with_endpoint_settings_uses_the_model_option_and_falls_back_to_rules():
    options = Options.resolve(options={"proposer": "llm", "llm_model": "local-coder"}, environ={})
    proposer = make_proposer(options, environ={**ENDPOINT, "OPENAI_MODEL": "ignored"})
    assert isinstance(proposer, LLMProposer) and proposer.client.model == "local-coder"
    assert isinstance(proposer.fallback, RuleProposer)
    from_env = make_proposer(Options.resolve(options={"proposer": "llm"}, environ={}),
                             environ={**ENDPOINT, "OPENAI_MODEL": "env-model"})  # fmt: skip
    assert from_env.client.model == "env-model"


class _Stop(Exception):
    pass


def test_the_searcher_hands_its_proposer_to_optimize(monkeypatch, tmp_path):
    import torch
    from helpers import subgraphs_of

    import kernelpro_backend.search as search
    from kernelpro_backend.autotune import SubgraphSearcher

    for name, value in ENDPOINT.items():
        monkeypatch.setenv(name, value)
    options = Options.resolve(
        options={"proposer": "llm", "cache_dir": str(tmp_path), "progress": False}, environ={}
    )
    searcher = SubgraphSearcher(options)
    seen = {}

    def fake_optimize(subgraph, **kwargs):
        seen.update(kwargs)
        raise _Stop

    monkeypatch.setattr(search, "optimize", fake_optimize)
    (sg,) = subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(8, 40), train=False)
    with pytest.raises(_Stop):
        searcher(sg)
    assert seen["proposer"] is searcher.proposer and isinstance(searcher.proposer, LLMProposer)
