"""The LLM proposer: children of a search node proposed by a model behind any
OpenAI-compatible chat endpoint (OPENAI_BASE_URL, OPENAI_API_KEY, through the `openai` client).

Modules: prompt.py (what the model is told), client.py (the endpoint: timeout, retries,
counts), answer.py (reading the JSON out of the answer), proposer.py (`LLMProposer`: answer to
candidates, duplicates and illegal proposals dropped, the fallback proposer when nothing is
usable).
Must not: run what the model wrote (the evaluator builds and checks proposals in an isolated
worker), measure candidates, or parse profiler output.
"""

from .answer import extract_json, proposal_items
from .client import DEFAULT_MODEL, ChatAnswer, ChatClient, ChatStats, LLMSetupError
from .prompt import finding_line, system_message, user_message
from .proposer import LLMProposer

__all__ = [
    "DEFAULT_MODEL",
    "ChatAnswer",
    "ChatClient",
    "ChatStats",
    "LLMProposer",
    "LLMSetupError",
    "extract_json",
    "finding_line",
    "proposal_items",
    "system_message",
    "user_message",
]
