"""Reading the LLM's answer: the JSON proposals out of whatever text came back.

Owns: `proposal_items(text)`, lenient about the wrapping (the whole text as JSON, else a fenced
code block, else the first JSON object in the text; `{"proposals": [...]}`, a bare list, or a
single proposal object) and strict about the result (a list, or None).
Must not: decide whether a proposal is legal (the proposer checks it against the search space)
or run anything: a proposal is data.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n(.*?)```", re.DOTALL)
MAX_SCAN = 200  # "{" positions tried in prose before the answer counts as malformed


def extract_json(text: str) -> Any | None:
    """The first JSON value the text holds, by the rules above; None if there is none."""
    stripped = text.strip()
    try:
        return json.loads(stripped)
    except ValueError:
        pass
    for block in _FENCE.findall(text):
        try:
            return json.loads(block)
        except ValueError:
            continue
    decoder = json.JSONDecoder()
    start = text.find("{")
    for _ in range(MAX_SCAN):
        if start < 0:
            return None
        try:
            value, _end = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        return value
    return None


def proposal_items(text: str) -> list[Any] | None:
    """The proposals of an answer (JSON values; the proposer drops and logs those that are not
    objects); None when the answer holds no list of proposals in a form this reads
    (malformed). An empty list is a valid answer: nothing to propose."""
    value = extract_json(text)
    if isinstance(value, dict):
        if "proposals" in value:
            value = value["proposals"]
        elif "knobs" in value or "source" in value:
            value = [value]  # one proposal, unwrapped
        else:
            return None
    if not isinstance(value, list):
        return None
    return value
