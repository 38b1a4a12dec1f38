"""Reading proposals out of an LLM's answer: plain JSON, fenced blocks, JSON inside prose, the
accepted shapes, and what counts as malformed."""

from __future__ import annotations

import json

import pytest

from kernelpro_backend.search.llm import extract_json, proposal_items

KNOBS = {"knobs": {"num_warps": 4}, "reason": "more warps"}


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"proposals": [KNOBS]}),
        "Here is my answer:\n```json\n" + json.dumps({"proposals": [KNOBS]}) + "\n```\nGood luck",
        "Sure. " + json.dumps({"proposals": [KNOBS]}) + " That is all.",
        "I think {this} helps: " + json.dumps({"proposals": [KNOBS]}),  # prose braces first
        json.dumps([KNOBS]),  # a bare list
        json.dumps(KNOBS),  # one proposal, unwrapped
    ],
)
def test_proposals_are_found_however_they_are_wrapped(text):
    assert proposal_items(text) == [KNOBS]


def test_a_fenced_block_keeps_source_with_braces_intact():
    source = "def entry(x):\n    d = {'a': 1}\n    return [x]\n"
    answer = {"proposals": [{"language": "triton", "entry": "entry", "source": source}]}
    text = "```\n" + json.dumps(answer, indent=2) + "\n```"
    [item] = proposal_items(text)
    assert item["source"] == source


def test_an_empty_list_is_a_valid_answer():
    assert proposal_items('{"proposals": []}') == []


@pytest.mark.parametrize(
    "text",
    [
        "",
        "I cannot help with that.",
        '{"proposals": [',  # cut off
        '{"answer": "use more warps"}',  # an object without proposals
        '{"proposals": "more warps"}',
        "42",
    ],
)
def test_malformed_answers_read_as_none(text):
    assert proposal_items(text) is None


def test_extract_json_prefers_the_whole_text():
    assert extract_json(' {"a": 1} ') == {"a": 1}
    assert extract_json("no json here") is None
